//! The drive loop: running one remote command on a pooled connection, as a request to its
//! resident runner or on a channel of its own (per exec). The driver task, the caller's read
//! loop, and the kill.
//!
//! Each command gets a *driver* task that owns its pool slot (and per exec its channel) for
//! the whole life of the command. The driver drains the channel into a queue as fast as data arrives,
//! because russh delivers every channel of a connection through one loop: a channel left
//! unread would stall every other command on the connection, keepalives included. The
//! caller's future only reads that queue, feeds the sink, and enforces the timeout.
//!
//! The queue holds at most [`OUTPUT_BUDGET`] bytes. A caller that falls that far behind (a
//! slow sink, a starved runtime) makes the driver stop reading: the connection pauses until
//! the caller catches up, rather than client memory growing with the output.
//!
//! When the caller times out, or its future is dropped, the driver kills the remote process
//! group (a `K` frame to the runner, a `K` on the command's control line, or from a second
//! channel for terminals and the crate's own scripts, whose stdin carries data) and keeps draining until the server closes the channel,
//! so the slot is released cleanly. A command is sent at most once: nothing is retried after the
//! exec request has left.
//!
//! The driver's phases are rooms of their own: [`request`] (what is sent, in the form of the
//! route taken), [`on_runner`] and [`on_channel`] (the two routes), [`stdin`] (the payload
//! and the caller's input), [`queue`] (the output queue between driver and caller) and
//! [`kill`] (kills from a second channel).

// Each submodule imports only from the ones before it on this line (`.ci/check-layers.py`):
// Layers, bottom up: queue < request < stdin < kill < on_runner < on_channel
mod kill;
mod on_channel;
mod on_runner;
mod queue;
mod request;
mod stdin;

use std::{sync::Arc, time::Duration};

use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};
use tracing::Instrument;

use self::queue::{CloseBudgetOnDrop, Event, budget_cost};
pub(crate) use self::{
    queue::OUTPUT_BUDGET,
    request::ExecRequest,
    stdin::{Control, Input, StdinItem},
};
use crate::{
    command::{
        output::{Execution, ExitStatus, OutputChunk, OutputSink, Retained},
        resident::{self, Choice},
    },
    config::{Config, limit},
    error::{Error, Result},
    pool::{Pool, Running},
};

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

/// One attempt: a slot on a connection, then the route. A request to the connection's
/// runner where it has one for the command's identity (or starts one), else a channel of
/// the command's own (per exec).
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
        // The command runs on its connection from here: retiring it waits for the start.
        let running = Running::new(slot.session.clone());
        let escalation = request.escalation.as_ref();
        let need = if request.guarded {
            resident::Need::Required
        } else {
            resident::Need::Preferred
        };
        match resident::runner_for(inner, &slot.session, escalation, need).await {
            Choice::Use(runner) => {
                return on_runner::drive(
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
    if request.guarded {
        if !config.unguarded_where_unenforceable {
            inner
                .registry
                .counters
                .guard_refusals
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Attempt::Done(Err(Error::GuardUnavailable {
                host: config.host.clone(),
                port: config.port,
                reason: unguarded_route(request, input.is_some(), config),
            }));
        }
        tracing::warn!(host = %config.host, reason = unguarded_route(request, input.is_some(), config),
            "running a guarded command WITHOUT its limits and confinement, as the builder allows");
    }
    on_channel::drive(inner, slot, request, events, budget, kill, gate, input).await
}

/// Why a guarded command would take the per-exec route, where nothing applies its guard.
fn unguarded_route(request: &ExecRequest, caller_stdin: bool, config: &Config) -> String {
    let why = if request.pty.is_some() {
        "a command in a terminal takes no runner"
    } else if caller_stdin || request.resident.is_none() {
        "a command with the caller's stdin, or one only the universal form runs exactly \
         (a `#!` script, a command over the runner's frame), takes no runner"
    } else if !resident::wanted(config) {
        "the executor runs commands per exec (Runner::PerExec)"
    } else {
        "no resident runner could start on the host (neither python3 nor perl, nor the helper)"
    };
    why.to_owned()
}
