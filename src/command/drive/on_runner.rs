//! The runner route: a command as a request to the connection's resident runner (see
//! `command::resident`).

use std::sync::Arc;

use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};

use super::{
    Attempt, StartGate,
    kill::spawn_kill,
    queue::{Event, forward},
};
use crate::{
    command::{
        escalation::Exchange,
        output::ExitStatus,
        resident::{self, Frame, Resident, RunnerRequest},
    },
    config::limit,
    error::Error,
    pool::{Pool, PooledSlot, Running},
};

/// Runs `job` through the connection's resident runner (see `command::resident`), with the
/// per-exec route's kill and give-up rules.
#[allow(clippy::too_many_arguments)]
pub(super) async fn drive(
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
    // A guarded command counts as guarded once the runner shows it took the guard (any
    // frame but a fault).
    let mut guard_counted = job.guard.is_none();
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
            frame = frames.recv() => {
                if !guard_counted && matches!(frame, Some(Frame::Started(_) | Frame::Output(_) | Frame::Ended(_))) {
                    guard_counted = true;
                    counters.guarded_commands.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                match frame {
                    Some(Frame::Started(group)) => pgid = Some(group),
                    Some(Frame::Output(chunk)) => {
                        taken += chunk.bytes().len();
                        forward(events, budget, chunk).await;
                        if taken >= resident::ACK_EVERY {
                            runner.ack(id, taken).await;
                            taken = 0;
                        }
                    }
                    Some(Frame::Ended(end)) => {
                        return Attempt::Done(Ok(resident::exit_status(end, job.guard.is_some())));
                    }
                    Some(Frame::Fault(reason)) if reason.starts_with("guard:") => {
                        counters.guard_refusals.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return Attempt::Done(Err(Error::GuardUnavailable {
                            host: config.host.clone(),
                            port: config.port,
                            reason,
                        }));
                    }
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
                }
            }
            _ = give_up => {
                tracing::warn!(host = %config.host, ?pgid,
                    "command still running after the kill; giving up on it (a process may have left the group)");
                runner.forget(id);
                return Attempt::Done(Ok(ExitStatus::Unknown));
            }
        }
    }
}
