//! The drive loop: running one remote command on a pooled channel. The driver task, the
//! caller's read loop, and the kill.
//!
//! Each command gets a *driver* task that owns its pool slot and its channel for the whole
//! life of the command. The driver drains the channel into a queue as fast as data arrives,
//! because russh delivers every channel of a connection through one loop: a channel left
//! unread would stall every other command on the connection, keepalives included. The
//! caller's future only reads that queue, feeds the sink, and enforces the timeout.
//!
//! The queue holds at most [`OUTPUT_BUDGET`] bytes. A caller that falls that far behind (a
//! slow sink, a starved runtime) makes the driver stop reading: the connection pauses until
//! the caller catches up, rather than client memory growing with the output.
//!
//! When the caller times out, or its future is dropped, the driver kills the remote process
//! group (a `K` on the command's control line, or from a second channel for the crate's own
//! scripts, whose stdin carries data) and keeps draining until the server closes the channel,
//! so the slot is released cleanly. A command is sent at most once: nothing is retried after the
//! exec request has left.

use std::{sync::Arc, time::Duration};

use tokio::{
    io::AsyncWriteExt,
    sync::{mpsc, oneshot},
    time::Instant,
};
use tracing::Instrument;

use crate::{
    command::{
        escalation::Exchange,
        marker::MarkerParser,
        output::{Execution, ExitStatus, OutputChunk, OutputSink, Retained},
        resident::{self, Choice, Frame, Resident, RunnerRequest},
        supervisor,
    },
    config::{Config, limit},
    error::{BecomeFailure, Error, Phase, Result},
    pool::{
        self, ChannelCount, Counters, Pool, PooledSlot, Running, Session, SpareKind, SparePlan,
    },
};

/// A fully prepared command.
#[derive(Debug)]
pub(crate) struct ExecRequest {
    /// The exec request text (see [`wrapper`](fn@crate::command::wrapper)).
    pub(crate) wrapper: Vec<u8>,
    /// Bytes for the command's stdin: the payload line, and for uncontrolled requests their
    /// data, followed by EOF.
    pub(crate) stdin: bytes::Bytes,
    /// The stderr marker prefix the wrapper prints with its pgid.
    pub(crate) marker: String,
    /// The channel's stdin is the wrapper's control line (see `Wrapped`): the kill
    /// is `K\n` on this channel. Otherwise it is sent from a second channel once the pgid is
    /// known.
    pub(crate) controlled: bool,
    /// The same command in the direct form (request, stdin, controlled; see
    /// [`direct_wrapper`](fn@crate::command::direct_wrapper)), used instead on connections
    /// that have learned that their login shell runs it.
    pub(crate) direct: Option<(Vec<u8>, bytes::Bytes, bool)>,
    /// What a pre-started spare gets on stdin for this command (see
    /// [`prestart_payload`](fn@crate::command::prestart_payload)).
    pub(crate) prestarted: crate::command::PrestartPayload,
    /// The request runs an escalation tool first (see `command::escalation`): its words
    /// before the marker are not the command's, and its prompt may want the password.
    pub(crate) escalation: Option<Exchange>,
    /// What a spare pre-escalated for this escalation gets on stdin (its shell runs as the
    /// target already, so the payload is the unescalated one's); `None` when the escalation
    /// does not pre-escalate spares.
    pub(crate) pre_escalated: Option<crate::command::PrestartPayload>,
    /// Run in a pseudo-terminal (on a channel of its own, never a spare).
    pub(crate) pty: Option<crate::command::Pty>,
    /// What the command sends a resident runner (see `command::resident`); `None`: it takes
    /// the per-exec path (escalated, a terminal, the caller's stdin, a form only the
    /// universal bootstrap runs exactly).
    pub(crate) resident: Option<RunnerRequest>,
}

impl ExecRequest {
    /// The request for one of the executor's own scripts (file fallbacks, `stream_files`'
    /// `find`, the jobs' scripts, an escalated kill): `script` with `data` on stdin, escalated
    /// by `exchange` (see [`script_request`](crate::command::script_request)).
    pub(crate) fn script(
        config: &Config,
        script: &[u8],
        data: &[u8],
        exchange: Option<Exchange>,
    ) -> Result<Self> {
        let marker = crate::command::marker_prefix(rand::random());
        let escalation = exchange.as_ref().map(Exchange::escalation);
        let wrapped = crate::command::script_request(&marker, script, data, escalation.as_ref())?;
        let supervision = crate::command::Supervision::of(config);
        // On a pre-started spare: the universal form (`U`, or `E` escalated), whose stdin
        // carries the data; on a pre-escalated one, the unescalated script's.
        let spare_payload = |wrapped: &crate::command::wrapper::Wrapped| {
            crate::command::prestart_payload(None, None, &config.env, &marker, supervision, wrapped)
        };
        let prestarted = spare_payload(&wrapped);
        let pre_escalated = match exchange
            .as_ref()
            .filter(|exchange| exchange.spares.is_some())
        {
            Some(_) => Some(spare_payload(&crate::command::script_request(
                &marker, script, data, None,
            )?)),
            None => None,
        };
        // Scripts take the connection's runner for their identity (the login's, or the one
        // started through the escalation), where one starts.
        let resident = RunnerRequest::script(script, data);
        Ok(ExecRequest {
            wrapper: wrapped.request,
            stdin: wrapped.stdin.into(),
            marker,
            controlled: wrapped.controlled,
            // Their stdin carries data, which the direct form's line reading would not leave
            // alone; they run rarely enough for the universal form.
            direct: None,
            prestarted,
            escalation: exchange,
            pre_escalated,
            pty: None,
            resident,
        })
    }
}

enum Event {
    Output(OutputChunk),
    Finished(Result<ExitStatus>),
}

/// Output bytes that may wait in a command's queue for the caller.
pub(crate) const OUTPUT_BUDGET: usize = 16 * 1024 * 1024;

/// What a chunk costs of [`OUTPUT_BUDGET`] (a chunk is one SSH packet, far below it).
fn budget_cost(chunk: &OutputChunk) -> u32 {
    u32::try_from(chunk.bytes().len().min(OUTPUT_BUDGET)).unwrap_or(u32::MAX)
}

/// Closes the budget when the caller's side goes away, so that a driver waiting for room
/// carries on (and kills) instead of waiting forever.
struct CloseBudgetOnDrop(Arc<tokio::sync::Semaphore>);

impl Drop for CloseBudgetOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Queues `chunk` for the caller once the budget has room; drops it when the caller is gone.
async fn forward(
    events: &mpsc::UnboundedSender<Event>,
    budget: &tokio::sync::Semaphore,
    chunk: OutputChunk,
) {
    match budget.acquire_many(budget_cost(&chunk)).await {
        Ok(permit) => permit.forget(),
        Err(_) => return,
    }
    let _ = events.send(Event::Output(chunk));
}

/// Runs `request`, streaming output to `sink`, and returns when the command has ended or the
/// timeout has expired (after the kill and a bounded drain).
///
/// # Cancel safety
/// Dropping the future kills the remote process group in the background (best effort: it
/// needs the connection to be alive).
pub(crate) async fn execute(
    inner: &Arc<Pool>,
    request: ExecRequest,
    timeout: Option<Duration>,
    sink: &mut OutputSink<'_>,
) -> Result<Execution> {
    launch(inner, request, None)
        .finish(inner, timeout, sink)
        .await
}

/// What the caller sends a running command (see [`Process`](crate::Process)): bytes for its
/// stdin, in order, then maybe the end of it.
#[derive(Debug)]
pub(crate) enum StdinItem {
    Data(bytes::Bytes),
    Eof,
}

/// Requests about a running command's channel that are not stdin.
#[derive(Debug)]
pub(crate) enum Control {
    /// The terminal's new size (`window-change`).
    Resize { cols: u32, rows: u32 },
}

/// The caller's side of a command's input: stdin bytes (forwarded in order once the command
/// runs, after its payload) and control requests.
#[derive(Debug)]
pub(crate) struct Input {
    pub(crate) stdin: Arc<tokio::sync::Mutex<mpsc::Receiver<StdinItem>>>,
    pub(crate) control: mpsc::UnboundedReceiver<Control>,
}

/// A command handed to its driver task: the caller's end of it. Dropping it kills the
/// command (the driver sees the kill sender go).
pub(crate) struct Launched {
    pub(crate) started: std::time::Instant,
    events: mpsc::UnboundedReceiver<Event>,
    kill: Option<oneshot::Sender<()>>,
    budget: Arc<tokio::sync::Semaphore>,
    _close_budget: CloseBudgetOnDrop,
    gate: Arc<StartGate>,
}

/// Hands `request` to a driver task of its own (which owns its slot and channel for the
/// command's life) and returns the caller's end.
pub(crate) fn launch(inner: &Arc<Pool>, request: ExecRequest, input: Option<Input>) -> Launched {
    let started = std::time::Instant::now();
    let (events_tx, events) = mpsc::unbounded_channel();
    let (kill_tx, kill_rx) = oneshot::channel::<()>();
    let budget = Arc::new(tokio::sync::Semaphore::new(OUTPUT_BUDGET));
    let gate = Arc::new(StartGate::default());
    // The driver's events belong to the caller's command span, and it follows the caller's
    // attempt policy (a fleet's dials fail at once when refused, and start no runner).
    // Boxed before it is wrapped: the driver's future is large, and a debug build's stack
    // would hold it once more inside the wrapper.
    tokio::spawn(crate::pool::keeping_attempt_policy(Box::pin(
        drive(
            inner.clone(),
            request,
            events_tx,
            budget.clone(),
            kill_rx,
            gate.clone(),
            input,
        )
        .instrument(tracing::Span::current()),
    )));
    Launched {
        started,
        events,
        kill: Some(kill_tx),
        _close_budget: CloseBudgetOnDrop(budget.clone()),
        budget,
        gate,
    }
}

impl Launched {
    /// A stand-in for a command whose driver's end was moved out: it hears nothing.
    pub(crate) fn ended() -> Self {
        let (_, events) = mpsc::unbounded_channel();
        let budget = Arc::new(tokio::sync::Semaphore::new(OUTPUT_BUDGET));
        Launched {
            started: std::time::Instant::now(),
            events,
            kill: None,
            _close_budget: CloseBudgetOnDrop(budget.clone()),
            budget,
            gate: Arc::new(StartGate::default()),
        }
    }
}

/// What the caller's end of a command hears next.
pub(crate) enum Heard {
    Output(OutputChunk),
    Finished(Result<ExitStatus>),
}

impl Launched {
    /// The next chunk or the end, or `None` when `deadline` passed first.
    pub(crate) async fn next(
        &mut self,
        config: &Config,
        deadline: Option<Instant>,
    ) -> Option<Heard> {
        let event = limit::within(deadline, self.events.recv()).await?;
        Some(match event {
            Some(Event::Output(chunk)) => {
                self.budget.add_permits(budget_cost(&chunk) as usize);
                Heard::Output(chunk)
            }
            Some(Event::Finished(result)) => Heard::Finished(result),
            None => Heard::Finished(Err(driver_vanished(config))),
        })
    }

    /// Asks the driver to kill the command.
    pub(crate) fn kill(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
    }

    /// After a kill: what still arrives while the group dies, bounded (a process that
    /// escaped the group may hold the channel open), into `sink` and `kept`. Returns whether
    /// the command was seen to end.
    pub(crate) async fn drain(
        &mut self,
        config: &Config,
        sink: &mut OutputSink<'_>,
        kept: &mut Retained,
    ) -> bool {
        let drain_until = limit::deadline(
            Instant::now(),
            limit::sum(&[config.kill_grace, config.drain_timeout]),
        );
        loop {
            match self.next(config, drain_until).await {
                Some(Heard::Output(chunk)) => {
                    sink(&chunk);
                    kept.push(chunk);
                }
                Some(Heard::Finished(result)) => return result.is_ok(),
                None => return false,
            }
        }
    }

    /// Streams the command's output to `sink` until it ends or `timeout` expires (then kills
    /// and drains), and returns everything about it.
    pub(crate) async fn finish(
        mut self,
        inner: &Arc<Pool>,
        timeout: Option<Duration>,
        sink: &mut OutputSink<'_>,
    ) -> Result<Execution> {
        let config = &inner.config;
        let mut kept = Retained::new(config.max_output_bytes);
        // A timeout too long for the clock has a deadline that never passes: no deadline.
        let deadline = timeout.and_then(|t| limit::deadline(Instant::now(), t));
        let finished = loop {
            match self.next(config, deadline).await {
                Some(Heard::Output(chunk)) => {
                    sink(&chunk);
                    kept.push(chunk);
                }
                Some(Heard::Finished(result)) => break Some(result),
                None => break None,
            }
        };
        let status = match finished {
            Some(result) => result?,
            None if self.gate.abandon() => {
                // The deadline passed before the command could start: nothing ran. If that
                // is because the host cannot be reached (no live connection, dials failing),
                // say so rather than "timed out"; otherwise (a full pool) it is an ordinary
                // timeout.
                self.kill();
                let last_error = inner.registry.last_dial_error();
                let connected = inner.registry.sessions().iter().any(|s| !s.is_dead());
                if last_error.is_some() && !connected {
                    return Err(Error::PoolTimeout {
                        host: config.host.clone(),
                        port: config.port,
                        waited: timeout.unwrap_or_default(),
                        last_error,
                    });
                }
                ExitStatus::TimedOut {
                    timeout: timeout.unwrap_or_default(),
                    confirmed_dead: true,
                }
            }
            None => {
                self.kill();
                // Like LocalExecutor, collect what arrives while the group dies.
                let confirmed_dead = self.drain(config, sink, &mut kept).await;
                ExitStatus::TimedOut {
                    timeout: timeout.unwrap_or_default(),
                    confirmed_dead,
                }
            }
        };
        Ok(self.execution(config, kept, status))
    }

    /// The [`Execution`] of a command that ended with `status`.
    pub(crate) fn execution(
        &self,
        config: &Config,
        kept: Retained,
        status: ExitStatus,
    ) -> Execution {
        let (chunks, omitted_bytes, omitted_at) = kept.finish();
        let execution = Execution {
            host: config.host.clone(),
            chunks,
            status,
            duration: self.started.elapsed(),
            omitted_bytes,
            omitted_at,
        };
        tracing::debug!(
            status = ?execution.status,
            duration_ms = execution.duration.as_millis() as u64,
            stdout_bytes = execution.stdout_len(),
            stderr_bytes = execution.stderr_len(),
            omitted_bytes,
            "command finished"
        );
        execution
    }
}

fn driver_vanished(config: &Config) -> Error {
    Error::ConnectionLost {
        host: config.host.clone(),
        port: config.port,
    }
}

/// Whether a command's exec request goes out, decided once: the driver claims it right before
/// sending; a caller whose deadline passes first abandons it, and nothing is sent.
#[derive(Debug, Default)]
struct StartGate(std::sync::atomic::AtomicU8);

impl StartGate {
    const PENDING: u8 = 0;
    const SENDING: u8 = 1;
    const ABANDONED: u8 = 2;

    fn claim(&self) -> bool {
        self.0
            .compare_exchange(
                Self::PENDING,
                Self::SENDING,
                std::sync::atomic::Ordering::AcqRel,
                std::sync::atomic::Ordering::Acquire,
            )
            .is_ok()
    }

    /// The request could not be sent after all: a retry may claim again.
    fn unclaim(&self) {
        let _ = self.0.compare_exchange(
            Self::SENDING,
            Self::PENDING,
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
        );
    }

    fn abandon(&self) -> bool {
        self.0
            .compare_exchange(
                Self::PENDING,
                Self::ABANDONED,
                std::sync::atomic::Ordering::AcqRel,
                std::sync::atomic::Ordering::Acquire,
            )
            .is_ok()
    }
}

async fn drive(
    inner: Arc<Pool>,
    request: ExecRequest,
    events: mpsc::UnboundedSender<Event>,
    budget: Arc<tokio::sync::Semaphore>,
    mut kill: oneshot::Receiver<()>,
    gate: Arc<StartGate>,
    mut input: Option<Input>,
) {
    let result = drive_command(
        &inner, request, &events, &budget, &mut kill, &gate, &mut input,
    )
    .await;
    let _ = events.send(Event::Finished(result));
}

/// Runs the command, starting it again on another channel (and connection) while it fails
/// before its exec request could have reached the server: the channel could not be opened
/// (the connection died, as when the server restarts), the request could not be sent, or the
/// server refused it (nothing ran). Retries stop `connect_timeout` after the first attempt.
/// Once the request may have arrived, nothing is retried: a lost connection is
/// [`Error::ConnectionLost`], "may have run".
async fn drive_command(
    inner: &Arc<Pool>,
    request: ExecRequest,
    events: &mpsc::UnboundedSender<Event>,
    budget: &tokio::sync::Semaphore,
    kill: &mut oneshot::Receiver<()>,
    gate: &StartGate,
    input: &mut Option<Input>,
) -> Result<ExitStatus> {
    let give_up_at = limit::deadline(Instant::now(), inner.config.connect_timeout);
    loop {
        let attempt = drive_once(inner, &request, events, budget, kill, gate, input).await;
        if matches!(attempt, Attempt::NotSent(_)) {
            gate.unclaim();
        }
        match attempt {
            Attempt::Done(result) => return result,
            Attempt::NotSent(error) if give_up_at.is_none_or(|at| Instant::now() < at) => {
                inner
                    .registry
                    .counters
                    .command_retries
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!(%error, "starting the command again: its request never reached the server");
            }
            Attempt::NotSent(error) => return Err(error),
        }
    }
}

/// How one attempt at a command ended.
enum Attempt {
    Done(Result<ExitStatus>),
    /// Failed before the exec request could have reached the server: safe to run again.
    NotSent(Error),
}

async fn drive_once(
    inner: &Arc<Pool>,
    request: &ExecRequest,
    events: &mpsc::UnboundedSender<Event>,
    budget: &tokio::sync::Semaphore,
    kill: &mut oneshot::Receiver<()>,
    gate: &StartGate,
    input: &mut Option<Input>,
) -> Attempt {
    let config = &inner.config;
    let pty = request.pty.as_ref();
    // Waiting for a slot is abortable: nothing has been sent yet.
    let mut slot = tokio::select! {
        biased;
        _ = &mut *kill => return Attempt::Done(Ok(ExitStatus::Unknown)),
        // Dials are retried inside (see `Registry::dial`): an error here is final.
        slot = inner.acquire_slot() => match slot {
            Ok(slot) => slot,
            Err(error) => return Attempt::Done(Err(error)),
        },
    };
    if let Some(job) = request
        .resident
        .as_ref()
        .filter(|job| input.is_none() && job.fits() && resident::wanted(config))
    {
        let running = Running::new(slot.session.clone());
        let escalation = request.escalation.as_ref();
        match resident::runner_for(inner, &slot.session, escalation).await {
            Choice::Use(runner) => {
                return drive_on_runner(
                    inner, slot, running, &runner, job, escalation, events, budget, kill, gate,
                )
                .await;
            }
            Choice::PerExec => {}
            Choice::Retry(error) => {
                slot.mark_broken();
                return Attempt::NotSent(error);
            }
            Choice::Fail(error) => return Attempt::Done(Err(error)),
        }
    }
    let wanted = request
        .escalation
        .as_ref()
        .and_then(|exchange| exchange.spares.as_ref());
    // A terminal is requested before the exec: no pre-started spare will do.
    let (mut slot, mut channel, _open, _running, kind) =
        match open_on_slot(slot, wanted, pty.is_some()).await {
            Acquired::Channel(slot, channel, count, running, kind) => {
                (slot, channel, count, running, kind)
            }
            Acquired::Retry(error) => return Attempt::NotSent(error),
        };
    tracing::trace!(session = slot.session.id, ?kind, "channel open");
    let prestarted = kind.prestarted();
    // What a pre-started shell gets: a pre-escalated one runs as the target already.
    let spare_payload = match kind {
        SpareKind::Escalated(_) => request
            .pre_escalated
            .as_ref()
            .unwrap_or(&request.prestarted),
        SpareKind::Login | SpareKind::Plain => &request.prestarted,
    };
    if !matches!(kill.try_recv(), Err(oneshot::error::TryRecvError::Empty)) || !gate.claim() {
        // Timed out or cancelled while the channel was opening: nothing has run.
        pool::give_back(channel, prestarted, config.connect_timeout).await;
        return Attempt::Done(Ok(ExitStatus::Unknown));
    }

    // The direct form once this connection has shown that its login shell runs it; on a
    // pre-started spare the login shell already waits for the payload: no exec request.
    let direct = request
        .direct
        .as_ref()
        .filter(|_| !prestarted && slot.session.direct_bootstrap() == Some(true));
    let (exec_text, stdin, controlled) = match direct {
        Some((text, stdin, controlled)) => (Some(text), stdin, *controlled),
        None if prestarted => (None, &spare_payload.stdin, spare_payload.controlled),
        None => (Some(&request.wrapper), &request.stdin, request.controlled),
    };
    if let Some(pty) = pty {
        // The universal form's payload travels on the terminal: its modes are set for it.
        let modes = pty.request_modes(direct.is_none());
        let requested = channel
            .request_pty(true, &pty.term, pty.cols, pty.rows, 0, 0, &modes)
            .await;
        if let Err(source) = requested {
            slot.mark_broken();
            return Attempt::NotSent(Error::Ssh {
                host: config.host.clone(),
                port: config.port,
                phase: Phase::Exec,
                source,
            });
        }
    }
    let exec = match exec_text {
        Some(text) => channel.exec(true, text.clone()).await,
        None => Ok(()),
    };
    if let Err(source) = exec {
        // russh queues messages for its session task; an error means the connection is gone
        // and the request was never queued, let alone sent.
        slot.mark_broken();
        return Attempt::NotSent(Error::Ssh {
            host: config.host.clone(),
            port: config.port,
            phase: Phase::Exec,
            source,
        });
    }
    if direct.is_some() || (prestarted && spare_payload.direct) {
        inner
            .registry
            .counters
            .direct_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    // From here on the command may be running: it is never sent again.
    tracing::trace!("exec request sent");
    let mut kill_wanted = false;
    let mut kill_sent = false;
    let mut give_up_at: Option<Instant> = None;
    // The payload line (see `command::wrapper`), written by a task of its own so that the
    // read loop notices a connection that dies meanwhile (russh waits for window space
    // without end when the peer is gone). stdin then stays open: EOF would tell the
    // supervisor that the client is gone.
    //
    // An escalation tool that may read a password from stdin gets nothing before it has
    // handed over (the marker): it would take the payload for a password.
    //
    // A pre-started shell needs its frame first, though: it starts the tool.
    let escalation = request.escalation.as_ref();
    let stdin_waits = escalation.is_some_and(Exchange::payload_waits);
    let mut stdin_started = !stdin_waits;
    let held_stdin = if stdin_waits && prestarted {
        let head = spare_payload.head.min(stdin.len());
        let _ = channel.data(&stdin[..head]).await;
        stdin.slice(head..)
    } else {
        stdin.clone()
    };
    // A terminal keeps stdin open for the caller's input, which follows the payload once
    // the marker shows the command runs (`go`: before it, an attempt may still be dropped).
    let keep_open = controlled || pty.is_some() || input.is_some();
    let (go, ready) = oneshot::channel::<()>();
    let mut go = Some(go);
    let mut caller_input = input.as_ref().map(|input| Forward {
        stdin: input.stdin.clone(),
        go: ready,
    });
    let mut payload = if stdin_waits {
        None
    } else {
        start_stdin(&channel, stdin, keep_open, caller_input.take()).await
    };
    // The reply to the `pty-req` comes before the exec's.
    let mut pty_pending = pty.is_some();
    let mut refused_pty = false;

    let session = slot.session.clone();
    let mut marker = match escalation {
        Some(_) => MarkerParser::escalated(&request.marker),
        None => MarkerParser::new(&request.marker),
    };
    // The escalation's prompts, its deadline, and a failure decided here (a timeout, a
    // password refused or missing) rather than read from the tool's words.
    let mut watcher = escalation.and_then(Exchange::watcher);
    let mut become_deadline =
        escalation.and_then(|exchange| limit::deadline(Instant::now(), exchange.settings.timeout));
    let mut become_outcome: Option<BecomeFailure> = None;
    // What the tool printed before the marker, both streams in arrival order.
    let mut said: Vec<u8> = Vec::new();
    let mut pgid: Option<u32> = None;
    let mut status: Option<ExitStatus> = None;
    let mut replied = false;
    // When the server accepted the exec request (it had forked the login shell by then): from
    // there to the marker is the login shell's start-up (`pool::startup`).
    let mut replied_at: Option<std::time::Instant> = None;
    // Any output (the marker included) means the request was processed.
    let mut heard = false;
    let mut eof = false;
    let mut closed = false;
    // A direct request holds its output back until the marker shows that the login shell ran
    // the bootstrap: if it did not, the command runs again in the universal form and this
    // attempt's output (the shell's complaint) must not reach the caller.
    // So does an escalated one: the command's first stdout may come before its marker.
    let mut held =
        (direct.is_some() || prestarted || escalation.is_some()).then(HeldOutput::default);

    loop {
        let give_up = limit::until(give_up_at);
        let become_timer = limit::until(become_deadline);
        tokio::select! {
            biased;
            // The escalation did not hand over in time: nothing ran.
            _ = become_timer => {
                become_outcome = Some(BecomeFailure::Timeout);
                let _ = channel.eof().await;
                let _ = channel.close().await;
                break;
            }
            // Fires on an explicit kill (timeout) and when the caller's future is dropped.
            _ = &mut *kill, if !kill_wanted => {
                kill_wanted = true;
                give_up_at = limit::deadline(
                    Instant::now(),
                    limit::sum(&[config.kill_grace, config.drain_timeout, config.connect_timeout]),
                );
            }
            // In a terminal, stdout and stderr are one stream, which carries the marker:
            // it is read as stderr is without one (and its parts passed on as stdout).
            message = channel.wait() => match merge_terminal(message, pty.is_some()) {
                // Before the hand-over of a tool that may read stdin, nothing of the command
                // has been sent: stdout is the tool's (BusyBox's su prompts there), not output.
                Some(russh::ChannelMsg::Data { data }) if !stdin_started => {
                    heard = true;
                    said.extend_from_slice(&data);
                    if become_outcome.is_none()
                        && let (Some(watcher), Some(exchange)) = (watcher.as_mut(), escalation)
                    {
                        become_outcome = exchange.answer(watcher, &said, &channel, config).await;
                    }
                }
                Some(russh::ChannelMsg::Data { data }) => {
                    heard = true;
                    emit(&mut held, events, budget, OutputChunk::Stdout(data)).await;
                }
                Some(russh::ChannelMsg::ExtendedData { data, .. }) => {
                    heard = true;
                    if escalation.is_some() && pgid.is_none() {
                        said.extend_from_slice(&data);
                    }
                    let (found, parts) = marker.feed(data);
                    if found.is_none()
                        && become_outcome.is_none()
                        && let (Some(watcher), Some(exchange)) = (watcher.as_mut(), escalation)
                    {
                        become_outcome = exchange.answer(watcher, &said, &channel, config).await;
                    }
                    if found.is_some() && escalation.is_some() {
                        // Handed over: the target's shell runs the bootstrap now. `S <shell>`:
                        // the tool had replaced a login shell that led its own group (see
                        // `wrapper::bootstrap`), which tells what it tells unescalated.
                        pgid = found;
                        become_deadline = None;
                        watcher = None;
                        if let Some(exchange) = escalation {
                            resident::note_escalated(inner, &session, exchange);
                        }
                        if !prestarted
                            && let Some(shell) =
                                marker.traits().and_then(|traits| traits.strip_prefix("S "))
                        {
                            session.learn_direct_bootstrap(crate::command::direct_capable(
                                &format!("L {shell}"),
                            ));
                        }
                        if !stdin_started {
                            stdin_started = true;
                            payload =
                                start_stdin(&channel, &held_stdin, keep_open, caller_input.take())
                                    .await;
                        }
                    } else if found.is_some() {
                        pgid = found;
                        if let Some(at) = replied_at {
                            // `L bash` from the universal form; the direct form says `L direct`.
                            let shell = marker
                                .traits()
                                .and_then(|traits| traits.split(' ').nth(1))
                                .filter(|name| *name != "direct");
                            session.login_shell_startup.record(
                                at.elapsed(),
                                &config.host,
                                config.port,
                                shell,
                            );
                        }
                        // Nothing of ours prints before the marker, in any form: stderr
                        // before it is the login shell talking (rc files, warnings). It would
                        // talk in every pre-started spare too, before its command, and each
                        // would be thrown away. (Not stdout: sshd may forward the command's
                        // first stdout before the marker, which is on another pipe.)
                        if marker.noise_before() {
                            session.note_noisy_login();
                        }
                        if direct.is_none()
                            && !prestarted
                            && let Some(traits) = marker.traits()
                        {
                            session.learn_direct_bootstrap(crate::command::direct_capable(traits));
                        }
                    }
                    for part in parts {
                        let chunk = if pty.is_some() {
                            OutputChunk::Stdout(part)
                        } else {
                            OutputChunk::Stderr(part)
                        };
                        emit(&mut held, events, budget, chunk).await;
                    }
                    if found.is_some() {
                        // The command runs: the caller's input may follow its payload.
                        if let Some(go) = go.take() {
                            let _ = go.send(());
                        }
                        release(&mut held, events, budget).await;
                    }
                }
                Some(russh::ChannelMsg::ExitStatus { exit_status }) => {
                    status = Some(ExitStatus::Code(exit_status));
                }
                Some(russh::ChannelMsg::ExitSignal { signal_name, core_dumped, .. }) => {
                    status = Some(ExitStatus::Signal {
                        name: signal_text(&signal_name),
                        core_dumped,
                    });
                }
                Some(russh::ChannelMsg::Success) if pty_pending => pty_pending = false,
                Some(russh::ChannelMsg::Failure) if pty_pending => {
                    // No terminal (`PermitTTY no`, a forced command): the exec must not run
                    // without one. It may have started already: it is killed like any other.
                    pty_pending = false;
                    refused_pty = true;
                    kill_wanted = true;
                    give_up_at = limit::deadline(
                        Instant::now(),
                        limit::sum(&[config.kill_grace, config.drain_timeout, config.connect_timeout]),
                    );
                }
                Some(russh::ChannelMsg::Success) => {
                    replied = true;
                    // Under an escalation the time to the marker is the tool's, not the
                    // login shell's start-up.
                    if exec_text.is_some() && escalation.is_none() {
                        replied_at = Some(std::time::Instant::now());
                    }
                }
                Some(russh::ChannelMsg::Eof) => eof = true,
                Some(russh::ChannelMsg::Failure) if !replied => {
                    // The server refused the request: nothing ran.
                    let _ = channel.close().await;
                    return Attempt::NotSent(Error::ExecRefused { host: config.host.clone(), port: config.port });
                }
                Some(russh::ChannelMsg::Close) => {
                    closed = true;
                    break;
                }
                // The connection is gone.
                None => break,
                Some(_) => {}
            },
            control = next_control(input), if pgid.is_some() && !kill_wanted => {
                if let Some(Control::Resize { cols, rows }) = control {
                    let _ = channel.window_change(cols, rows, 0, 0).await;
                }
            }
            _ = give_up => {
                tracing::warn!(host = %config.host, ?pgid,
                    "channel still open after the kill; closing it (a process may have left the group)");
                let _ = channel.close().await;
                break;
            }
        }
        // A controlled request's stdin is its supervisor's control line (a terminal's stdin is
        // the terminal: its kill comes from a second channel, below).
        if kill_wanted
            && !kill_sent
            && controlled
            && let Some(payload) = &payload
        {
            kill_sent = true;
            inner
                .registry
                .counters
                .kills
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if payload.is_written() {
                tracing::debug!(grace = ?config.kill_grace, "killing remote process group");
                // One packet on the command's own channel: no extra channel, no round trip.
                let _ =
                    tokio::time::timeout(config.connect_timeout, channel.data(&b"K\n"[..])).await;
            } else {
                // The remote side runs nothing before it has the whole line: closing stdin
                // now makes the bootstrap exit with 125, and nothing ran.
                payload.abort();
            }
            let _ = channel.eof().await;
        }
        if kill_wanted && !kill_sent && !stdin_started {
            // Still escalating: nothing of the command was sent, so nothing runs once stdin
            // closes (the tool's password read and the bootstrap's payload read both fail).
            kill_sent = true;
            let _ = channel.eof().await;
        }
        if kill_wanted && !kill_sent {
            if let Some(pgid) = pgid {
                kill_sent = true;
                spawn_kill(
                    inner.clone(),
                    session.clone(),
                    escalation.cloned(),
                    pgid,
                    pty.is_some(),
                );
            } else if status.is_some() {
                kill_sent = true;
            }
        }
    }
    if let Some(payload) = &payload {
        payload.abort();
    }
    if refused_pty {
        return Attempt::Done(Err(Error::TerminalRefused {
            host: config.host.clone(),
            port: config.port,
        }));
    }
    if let Some(exchange) = escalation
        && pgid.is_none()
        && !kill_wanted
    {
        let _ = marker.give_up();
        let said = said.as_slice();
        // A pre-started shell that ended before it ran anything (124, 125) said nothing:
        // that is the spare's failure, handled below, not the tool's.
        let spare_failed =
            prestarted && said.is_empty() && matches!(status, Some(ExitStatus::Code(124 | 125)));
        if !spare_failed && (become_outcome.is_some() || (closed && !session.is_dead())) {
            let exit = match status {
                Some(ExitStatus::Code(code)) => Some(code),
                _ => None,
            };
            let reason = become_outcome.unwrap_or_else(|| exchange.classify(said, exit));
            tracing::debug!(%reason, "the escalation failed; nothing ran");
            return Attempt::Done(Err(exchange.failed(config, reason, said)));
        }
    }
    if held.is_some() && pgid.is_none() && !kill_wanted && closed && !session.is_dead() {
        // The login shell did not run the direct bootstrap (it prints the marker before it
        // runs anything; so does a pre-started one, in either form), so nothing ran: the
        // universal form from now on.
        tracing::warn!(host = %config.host, "the login shell did not run the direct exec request; \
            using the universal form on this connection");
        session.refuse_direct_bootstrap();
        inner
            .registry
            .counters
            .direct_fallbacks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return Attempt::NotSent(Error::ExecRefused {
            host: config.host.clone(),
            port: config.port,
        });
    }
    release(&mut held, events, budget).await;
    for part in marker.give_up() {
        forward(events, budget, OutputChunk::Stderr(part)).await;
    }
    if kill_wanted && !kill_sent {
        tracing::warn!(host = %config.host, "command ended before its process group was known");
    }

    // OpenSSH may send the exit status before the last output: a status is the result only
    // once the server has also said "no more output" (EOF or close). A connection lost in
    // between leaves the output incomplete, which must not pass for a clean result.
    let output_complete = eof || closed;
    if closed && !replied && !heard && status.is_none() && !kill_wanted {
        // Closed without a word about the request (Dropbear does this to a request it never
        // processed when many channels start at once): nothing ran, so it may be retried.
        return Attempt::NotSent(Error::ExecRefused {
            host: config.host.clone(),
            port: config.port,
        });
    }
    Attempt::Done(match status {
        Some(status) if output_complete => Ok(status),
        None if closed && !session.is_dead() => Ok(ExitStatus::Unknown),
        _ => {
            slot.mark_broken();
            Err(Error::ConnectionLost {
                host: config.host.clone(),
                port: config.port,
            })
        }
    })
}

/// Runs `job` through the connection's resident runner (see `command::resident`): the
/// runner path of [`drive_once`], with the same kill and give-up rules.
#[allow(clippy::too_many_arguments)]
async fn drive_on_runner(
    inner: &Arc<Pool>,
    mut slot: PooledSlot,
    _running: Running,
    runner: &Arc<Resident>,
    job: &RunnerRequest,
    escalation: Option<&Exchange>,
    events: &mpsc::UnboundedSender<Event>,
    budget: &tokio::sync::Semaphore,
    kill: &mut oneshot::Receiver<()>,
    gate: &StartGate,
) -> Attempt {
    let config = &inner.config;
    let counters = &inner.registry.counters;
    if !matches!(kill.try_recv(), Err(oneshot::error::TryRecvError::Empty)) || !gate.claim() {
        // Timed out or cancelled while the runner started: nothing has run.
        return Attempt::Done(Ok(ExitStatus::Unknown));
    }
    let Ok((id, mut frames)) = runner.submit(job, config).await else {
        // The request never left: the runner's channel is gone; its next start will tell
        // whether the connection is.
        return Attempt::NotSent(Error::RunnerLost {
            host: config.host.clone(),
            port: config.port,
        });
    };
    counters
        .runner_commands
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // From here on the command may be running: it is never sent again.
    let mut pgid: Option<u32> = None;
    let mut kill_sent = false;
    let mut give_up_at: Option<Instant> = None;
    let mut taken = 0usize;
    loop {
        let give_up = limit::until(give_up_at);
        tokio::select! {
            biased;
            _ = &mut *kill, if !kill_sent => {
                kill_sent = true;
                counters.kills.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!(grace = ?config.kill_grace, "killing remote process group");
                runner.kill(id).await;
                give_up_at = limit::deadline(
                    Instant::now(),
                    limit::sum(&[config.kill_grace, config.drain_timeout, config.connect_timeout]),
                );
            }
            frame = frames.recv() => match frame {
                Some(Frame::Started(group)) => pgid = Some(group),
                Some(Frame::Output(chunk)) => {
                    taken += chunk.bytes().len();
                    forward(events, budget, chunk).await;
                    if taken >= resident::ACK_EVERY {
                        runner.ack(id, taken).await;
                        taken = 0;
                    }
                }
                Some(Frame::Ended(status)) => return Attempt::Done(Ok(status)),
                Some(Frame::Fault(reason)) => {
                    return Attempt::Done(Err(Error::RunnerFault {
                        host: config.host.clone(),
                        port: config.port,
                        reason,
                    }));
                }
                None => {
                    // The runner's channel closed under the command.
                    let session = slot.session.clone();
                    if session.is_dead() {
                        slot.mark_broken();
                        return Attempt::Done(Err(Error::ConnectionLost {
                            host: config.host.clone(),
                            port: config.port,
                        }));
                    }
                    counters.runners_lost.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(host = %config.host, ?pgid,
                        "the resident runner ended while a command ran; killing its group");
                    if let Some(pgid) = pgid {
                        // As the runner's identity: an escalated group is the target's.
                        spawn_kill(inner.clone(), session, escalation.map(Exchange::fresh), pgid, false);
                    }
                    return Attempt::Done(Err(Error::RunnerLost {
                        host: config.host.clone(),
                        port: config.port,
                    }));
                }
            },
            _ = give_up => {
                tracing::warn!(host = %config.host, ?pgid,
                    "command still running after the kill; giving up on it (a process may have left the group)");
                runner.forget(id);
                return Attempt::Done(Ok(ExitStatus::Unknown));
            }
        }
    }
}

/// Output of a direct request that waits for the marker (see `drive_once`), at most
/// [`HeldOutput::LIMIT`] bytes: past that it is released and the attempt can no longer fall
/// back.
#[derive(Default)]
struct HeldOutput {
    chunks: Vec<OutputChunk>,
    bytes: usize,
}

impl HeldOutput {
    /// The marker parser's own search limit: a login shell's noise before the marker.
    const LIMIT: usize = 64 * 1024;
}

/// Forwards `chunk`, or holds it while a direct request waits for its marker (releasing
/// everything held, in order, once the limit is reached).
async fn emit(
    held: &mut Option<HeldOutput>,
    events: &mpsc::UnboundedSender<Event>,
    budget: &tokio::sync::Semaphore,
    chunk: OutputChunk,
) {
    match held {
        Some(waiting) => {
            waiting.bytes += chunk.bytes().len();
            waiting.chunks.push(chunk);
            if waiting.bytes >= HeldOutput::LIMIT {
                release(held, events, budget).await;
            }
        }
        None => forward(events, budget, chunk).await,
    }
}

/// Forwards what a direct request held back and stops holding.
async fn release(
    held: &mut Option<HeldOutput>,
    events: &mpsc::UnboundedSender<Event>,
    budget: &tokio::sync::Semaphore,
) {
    if let Some(held) = held.take() {
        for chunk in held.chunks {
            forward(events, budget, chunk).await;
        }
    }
}

/// A terminal's output: stdout and stderr are one stream there, which carries the marker, so
/// it is handled as the marker's stream (stderr) is without a terminal.
fn merge_terminal(message: Option<russh::ChannelMsg>, terminal: bool) -> Option<russh::ChannelMsg> {
    match message {
        Some(russh::ChannelMsg::Data { data }) if terminal => {
            Some(russh::ChannelMsg::ExtendedData { data, ext: 1 })
        }
        other => other,
    }
}

/// The caller's next control request; never, when there is no caller input.
async fn next_control(input: &mut Option<Input>) -> Option<Control> {
    match input {
        Some(input) => input.control.recv().await,
        None => std::future::pending().await,
    }
}

/// The caller's stdin, forwarded after the payload once `go` says the command runs.
struct Forward {
    stdin: Arc<tokio::sync::Mutex<mpsc::Receiver<StdinItem>>>,
    go: oneshot::Receiver<()>,
}

/// Starts what goes on the command's stdin: with `keep_open` (a controlled request, whose
/// stdin then is the supervisor's control line, or a terminal) its payload line, by a
/// [`PayloadWriter`] that keeps stdin open and forwards the caller's input after it;
/// otherwise all of it, then EOF.
async fn start_stdin(
    channel: &russh::Channel<russh::client::Msg>,
    stdin: &bytes::Bytes,
    keep_open: bool,
    forward: Option<Forward>,
) -> Option<PayloadWriter> {
    if keep_open {
        return Some(PayloadWriter::start(channel, stdin, forward));
    }
    if stdin.is_empty() {
        let _ = channel.eof().await;
    } else {
        // Written concurrently with the read loop: an interpreter that exits without reading
        // its whole body must not stall us (nor fail the command, as LocalExecutor does).
        let mut writer = channel.make_writer();
        let body = stdin.clone();
        tokio::spawn(async move {
            let _ = writer.write_all(&body).await;
            let _ = writer.shutdown().await;
        });
    }
    None
}

/// Writes a command's payload line on its channel in the background.
struct PayloadWriter {
    task: tokio::task::JoinHandle<()>,
    written: Arc<std::sync::atomic::AtomicBool>,
}

impl PayloadWriter {
    fn start(
        channel: &russh::Channel<russh::client::Msg>,
        payload: &bytes::Bytes,
        forward: Option<Forward>,
    ) -> Self {
        let mut writer = channel.make_writer();
        let payload = payload.clone();
        let written = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = written.clone();
        let task = tokio::spawn(async move {
            if writer.write_all(&payload).await.is_ok() && writer.flush().await.is_ok() {
                done.store(true, std::sync::atomic::Ordering::Release);
                tracing::trace!("payload sent");
            } else {
                return;
            }
            // The caller's input, in order, once the command runs (its receiver is shared
            // with later attempts, which only happen before that).
            let Some(forward) = forward else { return };
            if forward.go.await.is_err() {
                return;
            }
            let mut stdin = forward.stdin.lock().await;
            while let Some(item) = stdin.recv().await {
                match item {
                    StdinItem::Data(bytes) => {
                        if writer.write_all(&bytes).await.is_err() || writer.flush().await.is_err()
                        {
                            return;
                        }
                    }
                    StdinItem::Eof => break,
                }
            }
            // Closed by the caller, or its handle is gone: EOF.
            let _ = writer.shutdown().await;
        });
        PayloadWriter { task, written }
    }

    /// The whole line has been handed to the connection.
    fn is_written(&self) -> bool {
        self.written.load(std::sync::atomic::Ordering::Acquire)
    }

    fn abort(&self) {
        self.task.abort();
    }
}

/// What a command attempt ended with before its exec request could reach the server.
enum Acquired {
    /// A slot and an open channel (with its count), the command running on its connection.
    /// The last field: what the channel already runs (a pre-started spare: see
    /// [`ExecRequest::prestarted`] and [`ExecRequest::pre_escalated`]).
    Channel(
        PooledSlot,
        russh::Channel<russh::client::Msg>,
        ChannelCount,
        Running,
        SpareKind,
    ),
    /// The channel could not be opened on the slot's connection (it died, or refused one
    /// too many): another slot may do, and nothing has been sent.
    Retry(Error),
}

/// Opens a channel on `slot`.
///
/// The open runs to completion (it is bounded by the connect timeout and the retries):
/// dropping `channel_open_session` halfway leaves a channel the server has opened and nobody
/// closes, which holds one of its `MaxSessions` slots and russh memory for good. Only the
/// wait for the slot, before this, is abortable.
///
/// The command counts as running on its connection from the moment it holds the slot (the
/// returned guard), so that retiring the connection does not close it under the open.
async fn open_on_slot(mut slot: PooledSlot, wanted: Option<&SparePlan>, fresh: bool) -> Acquired {
    let running = Running::new(slot.session.clone());
    match slot.open_channel(wanted, fresh).await {
        Ok((channel, count, kind)) => Acquired::Channel(slot, channel, count, running, kind),
        Err(error) => Acquired::Retry(error),
    }
}

fn signal_text(signal: &russh::Sig) -> String {
    match signal {
        russh::Sig::Custom(name) => name.clone(),
        other => format!("{other:?}"),
    }
}

/// Kills process group `pgid` from a new channel on `session`, in the background. A group
/// started through an escalation belongs to the target account, which the login user may
/// not signal: the kill then goes through the same escalation, as one of the executor's own
/// scripts (on any connection to the host).
///
/// With `session` (a terminal) the group's whole session is killed too.
fn spawn_kill(
    inner: Arc<Pool>,
    session: Arc<Session>,
    escalation: Option<Exchange>,
    pgid: u32,
    whole_session: bool,
) {
    inner
        .registry
        .counters
        .kills
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tokio::spawn(async move {
        let config = &inner.config;
        let killed = match escalation {
            None => {
                kill_group(
                    &session,
                    config,
                    &inner.registry.counters,
                    pgid,
                    whole_session,
                )
                .await
            }
            Some(exchange) => kill_escalated(&inner, exchange, pgid, whole_session).await,
        };
        if let Err(error) = killed {
            tracing::warn!(host = %config.host, pgid, %error, "killing the remote process group failed");
        }
    });
}

/// [`kill_group`] through an escalation: the kill script as one of the executor's own
/// scripts, escalated like the command was (its own prompt and password exchange).
async fn kill_escalated(
    inner: &Arc<Pool>,
    exchange: Exchange,
    pgid: u32,
    whole_session: bool,
) -> Result<()> {
    let script = supervisor::kill_script(pgid, inner.config.kill_grace, whole_session);
    let request = ExecRequest::script(
        &inner.config,
        script.as_bytes(),
        b"",
        Some(exchange.fresh()),
    )?;
    let within = limit::sum(&[inner.config.kill_grace, inner.config.connect_timeout]);
    execute(inner, request, Some(within), &mut |_| {}).await?;
    Ok(())
}

async fn kill_group(
    session: &Arc<Session>,
    config: &Config,
    counters: &Counters,
    pgid: u32,
    whole_session: bool,
) -> Result<()> {
    tracing::debug!(host = %config.host, pgid, grace = ?config.kill_grace, "killing remote process group");
    let (mut channel, _open) = pool::open_channel(session, config, counters, &mut || true).await?;
    channel
        .exec(
            true,
            supervisor::kill_request(pgid, config.kill_grace, whole_session),
        )
        .await
        .map_err(|source| Error::Ssh {
            host: config.host.clone(),
            port: config.port,
            phase: Phase::Kill,
            source,
        })?;
    let _ = channel.eof().await;
    // Drain to the server's close so the channel is released properly.
    let within = limit::sum(&[config.kill_grace, config.connect_timeout]);
    let drained = tokio::time::timeout(within, pool::wait_for_close(&mut channel)).await;
    if drained.is_err() {
        let _ = channel.close().await;
        return Err(Error::Timeout {
            host: config.host.clone(),
            port: config.port,
            phase: Phase::Kill,
            after: within,
        });
    }
    Ok(())
}
