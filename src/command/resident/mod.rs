//! The resident runner: one program per connection that runs the executor's commands as
//! requests on its channel, so that a command costs the host a `fork` and an `sh -c`
//! instead of a whole SSH session (sshd's fork and session set-up, the login shell, the
//! bootstrap).
//!
//! # Starting it
//!
//! The first command on a connection that can use a runner ([`RunnerRequest`]) opens one
//! more session channel and sends one exec request, login-shell neutral like the universal
//! form's bootstrap (see `command::wrapper`):
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
//! `fork` (see [`Interpreter`]). None answering (a BusyBox system, a login shell that exits at
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

pub(crate) use job::{JobMirror, RunnerJob, RunnerJobStart, start_job};

use crate::{
    command::{
        escalation::{Exchange, hand_over},
        output::{ExitStatus, OutputChunk},
    },
    config::{Config, Runner, limit},
    error::Error,
    pool::{self, ChannelCount, Counters, Pool, Session},
};

/// What can run the runner on a host, tried in this order on each connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interpreter {
    /// `runner.py` on Python 3.8 or later, which starts commands with `posix_spawn` (vfork
    /// and exec): the cheapest start of the three, about 60 % of Perl's server CPU per
    /// command (BENCHMARKS.md, round 17). It exits at once on an older Python.
    PythonSpawn,
    /// `runner.pl`: Perl 5 with Debian's Essential `perl-base` modules; `fork` and `exec`.
    Perl,
    /// `runner.py` on any Python 3.5 or later, with `fork` and `exec`: for hosts with an old
    /// Python and no Perl.
    PythonFork,
    /// The crate's `swiftide-ssh-runner` binary, where the executor was given one
    /// ([`SshExecutorBuilder::runner_helper`](crate::SshExecutorBuilder::runner_helper)):
    /// installed in `~/.cache/swiftide-ssh/` and checked by SHA-256 before each start (see
    /// [`helper_request`]). Tried first.
    Helper,
}

impl Interpreter {
    const ALL: [Interpreter; 3] = [
        Interpreter::PythonSpawn,
        Interpreter::Perl,
        Interpreter::PythonFork,
    ];

    /// The runner's script. Sent on stdin at each start: nothing is left on the host. (The
    /// helper is sent only when its copy on the host is missing or altered.)
    fn script(self) -> &'static str {
        match self {
            Interpreter::Helper => "",
            Interpreter::PythonSpawn | Interpreter::PythonFork => protocol::PYTHON,
            Interpreter::Perl => protocol::PERL,
        }
    }

    /// The program that starts the runner: it reads `len` bytes of script from stdin and
    /// runs them (with the arguments after it). Login-shell neutral (no `'`, `\`, `!` or
    /// newline), so that every login shell passes it through single quotes unchanged.
    fn loader(self, len: usize) -> String {
        match self {
            Interpreter::Helper => String::new(),
            Interpreter::Perl => format!(
                "$n={len};$s=\"\";while($n>0){{$r=sysread(STDIN,$s,$n,length $s);\
                 $r>0 or exit 125;$n-=$r}}eval $s;print STDERR $@;exit 125"
            ),
            // A short read at EOF leaves the script cut: it fails to compile, and says so.
            Interpreter::PythonSpawn | Interpreter::PythonFork => format!(
                "import os;n={len};b=bytearray();\
                 r=lambda:os.read(0,n-len(b)) if len(b)<n else b\"\";\
                 [b.extend(c) for c in iter(r,b\"\")];exec(bytes(b))"
            ),
        }
    }

    /// The exec request: the loader, then the script's arguments (see PROTOCOL.md,
    /// "Starting").
    fn request(self, len: usize, nonce: &str) -> String {
        let program = self.loader(len);
        debug_assert!(crate::command::wrapper::is_neutral(&program));
        match self {
            Interpreter::Helper => String::new(),
            Interpreter::Perl => format!("exec perl -e '{program}' {nonce}"),
            Interpreter::PythonSpawn => format!("exec python3 -c '{program}' {nonce} spawn"),
            Interpreter::PythonFork => format!("exec python3 -c '{program}' {nonce} fork"),
        }
    }
}

/// The helper's start (see [`Interpreter::Helper`]): `/bin/sh` runs the copy in
/// `~/.cache/swiftide-ssh/` if it is a file of the login's whose SHA-256 is `sha256`, and
/// otherwise prints the `need` marker (never the hello's nonce, which the hello is found
/// by), reads `len` bytes from stdin into a private temporary file (umask 077), renames it
/// into place, checks it again and runs it. Login-shell neutral (see `wrapper::is_neutral`). Nothing else is on the channel while it reads: the client
/// sends the bytes only after the marker, and frames only after the hello.
fn helper_request(sha256: &str, len: usize, nonce: &str, need: &str) -> String {
    let program = format!(
        "h=\"$HOME/.cache/swiftide-ssh/runner-{sha256}\"; \
         ok() {{ [ -f \"$h\" ] && [ -O \"$h\" ] && s=$(sha256sum <\"$h\" 2>/dev/null) && [ \"${{s%% *}}\" = {sha256} ]; }}; \
         if ok; then exec \"$h\" {nonce}; fi; echo {need}; umask 077; \
         mkdir -p \"${{h%/*}}\" && chmod 700 \"${{h%/*}}\" && t=\"$h.$$\" && head -c {len} >\"$t\" && \
         chmod 700 \"$t\" && mv -f \"$t\" \"$h\" && ok && exec \"$h\" {nonce}; rm -f \"$t\"; \
         echo \"the runner helper could not be installed or failed its checksum\" >&2; exit 127"
    );
    debug_assert!(crate::command::wrapper::is_neutral(&program));
    format!("exec /bin/sh -c '{program}'")
}

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
}

impl RunnerRequest {
    /// A user's command: the direct form's `sh -c` text.
    pub(crate) fn command(text: Vec<u8>) -> Self {
        Self {
            text,
            stdin: None,
            system_shell: false,
        }
    }

    /// Whether the request fits in one frame ([`protocol::MAX_DATA`]); a larger one goes
    /// per exec, where the universal form carries a command of any length on stdin.
    pub(crate) fn fits(&self) -> bool {
        self.run(RunFlags::default(), 0).fits()
    }

    /// The run request's data for this command.
    fn run(&self, flags: RunFlags, grace_ms: u32) -> Run<'_> {
        Run {
            flags,
            grace_ms,
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
        })
    }
}

/// What the runner says about one request.
#[derive(Debug)]
pub(crate) enum Frame {
    /// The command runs; its process group.
    Started(u32),
    Output(OutputChunk),
    Ended(ExitStatus),
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

/// Whether a command runs through a runner on its connection.
pub(crate) enum Choice {
    Use(Arc<Resident>),
    /// No runner here: the per-exec path.
    PerExec,
    /// The runner's channel could not be opened (the connection died): nothing was sent.
    Retry(Error),
    Fail(Error),
}

/// What a connection keeps about its runners (one of its `pool::Extensions`): the login's,
/// and one per escalation and credential (`Become::access_key`), each started once.
#[derive(Default)]
pub(crate) struct RunnerSlots(Mutex<HashMap<Option<String>, Arc<RunnerSlot>>>);

impl RunnerSlots {
    /// The slot of the runner that runs as `escalation`'s target (`None`: the login).
    fn slot(&self, escalation: Option<&Exchange>) -> Arc<RunnerSlot> {
        let key = escalation.map(|exchange| exchange.settings.access_key());
        let mut slots = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slots.entry(key).or_default().clone()
    }
}

/// What a connection keeps about one of its runners.
#[derive(Default)]
struct RunnerSlot {
    /// The runner, once one answered.
    ready: Mutex<Option<Arc<Resident>>>,
    /// Held by the start in flight: one at a time per connection.
    starting: tokio::sync::Mutex<()>,
    /// Why no runner could start here: the connection's commands go per exec for good.
    refused: Mutex<Option<String>>,
}

impl RunnerSlot {
    /// The runner, if one is up and its channel open.
    fn ready(&self) -> Option<Arc<Resident>> {
        let ready = self.ready.lock().ok()?;
        ready.as_ref().filter(|runner| runner.is_open()).cloned()
    }

    fn refused(&self) -> Option<String> {
        self.refused.lock().ok()?.clone()
    }

    /// Keeps what a start gave, and counts it.
    fn record(&self, outcome: &Start, config: &Config, counters: &Counters) {
        match outcome {
            Start::Ready(runner) => {
                counters.runners_started.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut name) = counters.runner.lock() {
                    *name = Some(runner.name.clone());
                }
                tracing::debug!(host = %config.host, runner = %runner.name, "resident runner started");
                if let Ok(mut ready) = self.ready.lock() {
                    *ready = Some(runner.clone());
                }
            }
            Start::Refused(reason) => {
                counters.runner_fallbacks.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(host = %config.host, %reason,
                    "no resident runner on this connection; commands run per exec");
                if let Ok(mut refused) = self.refused.lock() {
                    *refused = Some(reason.clone());
                }
            }
            // The connection died under the start, or the escalation failed as it would per
            // exec (the next command asks again): nothing to keep.
            Start::Retry(_) | Start::Fail(_) => {}
        }
    }
}

/// The runner of `session` that runs as `escalation`'s target (`None`: as the login),
/// started if need be (one start at a time per connection and identity; the commands that
/// come meanwhile wait for it).
pub(crate) async fn runner_for(
    pool: &Arc<Pool>,
    session: &Arc<Session>,
    escalation: Option<&Exchange>,
) -> Choice {
    let config = &pool.config;
    let counters = &pool.registry.counters;
    let per_exec = |reason: String| match config.runner {
        Runner::Resident => Choice::Fail(Error::RunnerUnavailable {
            host: config.host.clone(),
            port: config.port,
            reason,
        }),
        _ => Choice::PerExec,
    };
    let slot = session.extensions.get::<RunnerSlots>().slot(escalation);
    let checked = |slot: &RunnerSlot| match (slot.ready(), slot.refused()) {
        (Some(runner), _) => Some(Choice::Use(runner)),
        (None, Some(reason)) => Some(per_exec(reason)),
        (None, None) => None,
    };
    if let Some(choice) = checked(&slot) {
        return choice;
    }
    if config.runner == Runner::Auto && pool::in_fleet_attempt() {
        // A fleet's one command (or few) per host: a runner's start would cost more than it
        // saves (see `pool::fleet_attempt`). Not refused: the connection's later work may
        // start one.
        return Choice::PerExec;
    }
    let _starting = slot.starting.lock().await;
    // A start that ended while this one waited for the lock decided already.
    if let Some(choice) = checked(&slot) {
        return choice;
    }
    let outcome = start(session, config, counters, escalation).await;
    slot.record(&outcome, config, counters);
    match outcome {
        Start::Ready(runner) => Choice::Use(runner),
        Start::Refused(reason) => per_exec(reason),
        Start::Retry(error) => Choice::Retry(error),
        Start::Fail(error) => Choice::Fail(error),
    }
}

enum Start {
    Ready(Arc<Resident>),
    /// This interpreter did not answer; the next may.
    Refused(String),
    /// The connection died under the start: nothing was sent.
    Retry(Error),
    /// The escalation failed ([`Error::BecomeFailed`]): the command's per-exec escalation
    /// would fail alike, and asking again would cost the password another try.
    Fail(Error),
}

/// Starts a runner on `session` (through `escalation`, when given): the helper where one was
/// given, then Python with `posix_spawn`, Perl, any Python; refused when none answers.
async fn start(
    session: &Arc<Session>,
    config: &Config,
    counters: &Counters,
    escalation: Option<&Exchange>,
) -> Start {
    let mut reasons = Vec::new();
    let helper = config
        .runner_helper
        .is_some()
        .then_some(Interpreter::Helper);
    for interpreter in helper.into_iter().chain(Interpreter::ALL) {
        match start_with(interpreter, session, config, counters, escalation).await {
            Start::Refused(reason) => reasons.push(format!("{interpreter:?}: {reason}")),
            started => return started,
        }
    }
    Start::Refused(reasons.join("; "))
}

async fn start_with(
    interpreter: Interpreter,
    session: &Arc<Session>,
    config: &Config,
    counters: &Counters,
    escalation: Option<&Exchange>,
) -> Start {
    let (mut channel, count) =
        match pool::open_channel(session, config, counters, &mut || true).await {
            Ok(opened) => opened,
            Err(error) => return Start::Retry(error),
        };
    let nonce = format!("swiftide-runner-{:016x}", rand::random::<u64>());
    let script = interpreter.script();
    let helper = config
        .runner_helper
        .as_ref()
        .filter(|_| interpreter == Interpreter::Helper);
    let need = format!("swiftide-need-{:016x}", rand::random::<u64>());
    let request = match helper {
        Some(helper) => helper_request(&helper.sha256, helper.binary.len(), &nonce, &need),
        None => interpreter.request(script.len(), &nonce),
    };
    let said = match escalation {
        None => launch(&channel, request, config).await,
        Some(exchange) => launch_escalated(&mut channel, request, exchange, config).await,
    };
    let said = match said {
        Ok(said) => said,
        Err(failed) => {
            let _ = channel.close().await;
            return failed;
        }
    };
    // The script goes out while the hello is awaited: a login shell that exits at once
    // must not leave this write waiting for window space. The helper goes out only when
    // the host asks for it (`need`).
    fn send(
        mut writer: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
        bytes: Bytes,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let _ = tokio::io::AsyncWriteExt::write_all(&mut writer, &bytes).await;
        })
    }
    let mut script_out = send(channel.make_writer(), Bytes::from_static(script.as_bytes()));
    let mut helper_out = helper.map(|helper| (channel.make_writer(), helper));
    let mut stdout = BytesMut::from(&said[..]);
    let mut stderr = Vec::new();
    let mut exit: Option<String> = None;
    let hello = limit::within(
        limit::deadline(tokio::time::Instant::now(), config.connect_timeout),
        async {
            loop {
                // What came so far (an escalated start's stdout before its hand-over too).
                if let Some((end, hello)) = protocol::find_hello(&stdout, &nonce) {
                    stdout.advance(end);
                    return Some(hello.name());
                }
                if helper_out.is_some()
                    && stdout
                        .windows(need.len())
                        .any(|window| window == need.as_bytes())
                    && let Some((writer, helper)) = helper_out.take()
                {
                    tracing::debug!(host = %config.host, sha256 = %helper.sha256,
                        "installing the runner helper");
                    script_out = send(writer, helper.binary.clone());
                }
                // Keep what may be the start of the hello, not the login's chatter.
                if stdout.len() > 64 * 1024 {
                    let keep = stdout.len() - 1024;
                    stdout.advance(keep);
                }
                match channel.wait().await {
                    Some(russh::ChannelMsg::Data { data }) => stdout.extend_from_slice(&data),
                    Some(russh::ChannelMsg::ExtendedData { data, .. }) => {
                        if stderr.len() < 4096 {
                            stderr.extend_from_slice(&data);
                        }
                    }
                    Some(russh::ChannelMsg::ExitStatus { exit_status }) => {
                        exit = Some(format!("exit status {exit_status}"));
                    }
                    Some(russh::ChannelMsg::Failure) => {
                        exit = Some("the server refused the exec request".to_owned());
                        return None;
                    }
                    Some(russh::ChannelMsg::Close) | None => return None,
                    Some(_) => {}
                }
            }
        },
    )
    .await
    .flatten();
    let Some(name) = hello else {
        script_out.abort();
        let _ = channel.close().await;
        if session.is_dead() {
            return Start::Retry(Error::ConnectionLost {
                host: config.host.clone(),
                port: config.port,
            });
        }
        let said = String::from_utf8_lossy(&stderr).trim().to_owned();
        let reason = match (exit, said.is_empty()) {
            (Some(exit), true) => exit,
            (Some(exit), false) => format!("{exit}: {said}"),
            (None, true) => format!("no answer within {:?}", config.connect_timeout),
            (None, false) => said,
        };
        return Start::Refused(reason);
    };
    let (read, write) = channel.split();
    let routes = Arc::new(Mutex::new(Routes::default()));
    tokio::spawn(read_frames(read, stdout, routes.clone()));
    Start::Ready(Arc::new(Resident {
        writer: tokio::sync::Mutex::new(write),
        routes,
        next_id: AtomicU32::new(1),
        name,
        _count: count,
    }))
}

/// Sends the runner's start as the login's exec request. Returns what it said so far
/// (nothing).
async fn launch(
    channel: &russh::Channel<russh::client::Msg>,
    request: String,
    config: &Config,
) -> std::result::Result<Vec<u8>, Start> {
    match channel.exec(true, request.into_bytes()).await {
        Ok(()) => Ok(Vec::new()),
        Err(source) => Err(Start::Retry(Error::Ssh {
            host: config.host.clone(),
            port: config.port,
            phase: crate::error::Phase::Exec,
            source,
        })),
    }
}

/// Sends the runner's start through `exchange`'s escalation, as one of the executor's own
/// scripts (the escalated SFTP server's way: `script_request`, then [`hand_over`], which
/// answers the tool's password prompt with a fresh random prompt). Returns the stdout that
/// came before the hand-over, where a quick runner's hello may begin.
async fn launch_escalated(
    channel: &mut russh::Channel<russh::client::Msg>,
    request: String,
    exchange: &Exchange,
    config: &Config,
) -> std::result::Result<Vec<u8>, Start> {
    let exchange = exchange.fresh();
    let marker = crate::command::marker_prefix(rand::random());
    let wrapped = crate::command::script_request(
        &marker,
        request.as_bytes(),
        b"",
        Some(&exchange.escalation()),
    )
    .map_err(Start::Fail)?;
    if let Err(source) = channel.exec(true, wrapped.request).await {
        return Err(Start::Retry(Error::Ssh {
            host: config.host.clone(),
            port: config.port,
            phase: crate::error::Phase::Exec,
            source,
        }));
    }
    match hand_over(channel, &exchange, config, &marker, &wrapped.stdin).await {
        Ok(said) => Ok(said),
        Err(error @ Error::BecomeFailed { .. }) => Err(Start::Fail(error)),
        Err(error) => Err(Start::Retry(error)),
    }
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
                Some(Kind::Ended) => Some(Frame::Ended(exit_status(&data))),
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
/// (which names thirteen and calls the rest `SIG@openssh.com`).
fn exit_status(data: &[u8]) -> ExitStatus {
    match End::decode(data) {
        Some(End::Code(code)) => u32::try_from(code).map_or(ExitStatus::Unknown, ExitStatus::Code),
        Some(End::Signal { name, core_dumped }) => {
            const OPENSSH_NAMES: &[&str] = &[
                "ABRT", "ALRM", "FPE", "HUP", "ILL", "INT", "KILL", "PIPE", "QUIT", "SEGV", "TERM",
                "USR1", "USR2",
            ];
            let name = if OPENSSH_NAMES.contains(&name.as_str()) {
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
            | flag(request.system_shell, RunFlags::SYSTEM_SHELL);
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
    fn the_loaders_are_login_shell_neutral() {
        for interpreter in Interpreter::ALL {
            assert!(crate::command::wrapper::is_neutral(
                &interpreter.loader(12345)
            ));
        }
    }

    #[test]
    fn the_helper_start_is_login_shell_neutral() {
        let request = helper_request(
            &"ab".repeat(32),
            123,
            "swiftide-runner-1",
            "swiftide-need-2",
        );
        let program = request
            .strip_prefix("exec /bin/sh -c '")
            .and_then(|rest| rest.strip_suffix('\''))
            .expect("one quoted word");
        assert!(crate::command::wrapper::is_neutral(program));
    }

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
        assert_eq!(exit_status(b"c 3"), ExitStatus::Code(3));
        assert_eq!(
            exit_status(b"s TERM 0"),
            ExitStatus::Signal {
                name: "TERM".into(),
                core_dumped: false
            }
        );
        assert_eq!(
            exit_status(b"s BUS 1"),
            ExitStatus::Signal {
                name: "SIG@openssh.com".into(),
                core_dumped: true
            }
        );
        assert_eq!(exit_status(b"?"), ExitStatus::Unknown);
    }
}
