//! The rollout every fleet operation shares ([`run`](super::Fleet::run),
//! [`push`](super::Fleet::push), [`pull`](super::Fleet::pull), jobs): batches, thresholds,
//! fail-fast, retries of unreachable hosts, the per-host deadline, the descriptor limit and
//! the release of connections, and the same [`FleetReport`], so records, folding,
//! failed-hosts files and the exit-code policy apply to every operation alike.
//!
//! An operation reports its outcome as an [`Execution`]: its status says how the host
//! fared, its standard output is a short summary in words that is the same on hosts that
//! fared alike (so that folding gathers them).

use std::{
    future::Future,
    ops::Range,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use futures::StreamExt;
use tokio::sync::mpsc;

use super::{
    Fleet, FleetEvent, FleetReport, HostResult, Message, backoff, copy::PushedFiles,
    status::HostStatus,
};
use crate::{
    command::{Execution, ExitStatus, OutputChunk},
    config::limit,
    error::Result,
    executor::SshExecutor,
    pool::fleet_attempt,
};

/// One attempt's outcome on a host: the execution, and for a push what it did to each file
/// (the typed side of its summary, carried into [`HostResult::pushed`]).
pub(crate) struct Attempted {
    pub(crate) execution: Execution,
    pub(crate) pushed: Option<PushedFiles>,
}

impl From<Execution> for Attempted {
    fn from(execution: Execution) -> Self {
        Attempted {
            execution,
            pushed: None,
        }
    }
}

/// An operation's result with `status` and `summary` as its standard output.
pub(crate) fn summary_execution(host: &str, status: ExitStatus, summary: String) -> Execution {
    let mut chunks = Vec::new();
    if !summary.is_empty() {
        chunks.push(OutputChunk::Stdout(summary.into_bytes().into()));
    }
    Execution {
        host: host.to_owned(),
        chunks,
        status,
        duration: std::time::Duration::ZERO,
        omitted_bytes: 0,
        omitted_at: 0,
    }
}

impl Fleet {
    /// Runs `op` on every host, batch after batch, as [`run`](Self::run) runs a command:
    /// `op(member, executor)` is one attempt (an [`Unreachable`](HostStatus::Unreachable)
    /// failure is attempted again when the fleet retries), bounded by the per-host deadline
    /// (a host over it is reported as [`ExitStatus::TimedOut`]). No `Output` events: the
    /// operation's summary comes with `Finished`.
    pub(crate) async fn run_each<'s, F, Fut, T>(
        &'s self,
        op: F,
        on_event: impl FnMut(FleetEvent<'_>),
    ) -> FleetReport
    where
        F: Fn(usize, &'s SshExecutor) -> Fut,
        Fut: Future<Output = Result<T>>,
        T: Into<Attempted>,
    {
        let deadline = self.per_host_timeout;
        self.rollout(
            |index, executor, _events| bounded(deadline, executor.host(), op(index, executor)),
            on_event,
        )
        .await
    }

    /// The rollout every fleet operation shares: batches, thresholds, fail-fast, retries of
    /// unreachable hosts, the descriptor limit and the release of connections.
    /// `attempt_once(member, executor, events)` is one attempt on one host, bounded by the
    /// per-host deadline itself; it may send `Output` messages on `events`.
    pub(super) async fn rollout<'s, F, Fut, T>(
        &'s self,
        attempt_once: F,
        mut on_event: impl FnMut(FleetEvent<'_>),
    ) -> FleetReport
    where
        F: Fn(usize, &'s SshExecutor, mpsc::UnboundedSender<Message>) -> Fut,
        Fut: Future<Output = Result<T>>,
        T: Into<Attempted>,
    {
        let run_started = tokio::time::Instant::now();
        let stop = AtomicBool::new(false);
        let mut results = Vec::with_capacity(self.members.len());
        let mut skipped = Vec::new();
        let mut stopped: Option<String> = None;
        // Refused before any connection: every host is reported skipped, with the reason.
        if let Err(error) = self.ensure_descriptor_limit() {
            stopped = Some(error.to_string());
        }
        for (batch, range) in self
            .batches
            .split(self.members.len())
            .into_iter()
            .enumerate()
        {
            if let Some(reason) = &stopped {
                for member in range {
                    if let Some(host) = self.skipped(member, reason) {
                        on_event(FleetEvent::Skipped { skipped: &host });
                        skipped.push(host);
                    }
                }
                continue;
            }
            on_event(FleetEvent::BatchStarted {
                batch,
                members: range.clone(),
            });
            let hosts = range.len();
            let (ran, not_started) = self
                .rollout_batch(
                    &attempt_once,
                    batch,
                    range,
                    run_started,
                    &stop,
                    &mut on_event,
                )
                .await;
            let failed = ran.iter().filter(|r| !r.status().is_ok()).count();
            results.extend(ran);
            if stop.load(Ordering::Relaxed) {
                stopped = Some(format!("fail-fast: a host failed in batch {batch}"));
            } else if self.thresholds.batch_trips(failed, hosts) {
                stopped = Some(format!(
                    "batch {batch}: {failed} of {hosts} hosts failed, over the maximum of {}%",
                    self.thresholds.max_fail_percentage.unwrap_or(0)
                ));
            }
            for member in not_started {
                let reason = stopped.as_deref().unwrap_or("fail-fast");
                if let Some(host) = self.skipped(member, reason) {
                    on_event(FleetEvent::Skipped { skipped: &host });
                    skipped.push(host);
                }
            }
        }
        results.sort_by_key(|r| r.member);
        FleetReport {
            results,
            skipped,
            stopped,
            duration: run_started.elapsed(),
        }
    }

    /// One batch of [`rollout`](Self::rollout): its results in member order, and the members
    /// fail-fast kept from starting.
    async fn rollout_batch<'s, F, Fut, T>(
        &'s self,
        attempt_once: &F,
        batch: usize,
        range: Range<usize>,
        run_started: tokio::time::Instant,
        stop: &AtomicBool,
        on_event: &mut impl FnMut(FleetEvent<'_>),
    ) -> (Vec<HostResult>, Vec<usize>)
    where
        F: Fn(usize, &'s SshExecutor, mpsc::UnboundedSender<Message>) -> Fut,
        Fut: Future<Output = Result<T>>,
        T: Into<Attempted>,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
        let fail_fast = self.thresholds.fail_fast;
        let members = range
            .clone()
            .filter_map(|index| self.members.get(index).map(|e| (index, e)));
        let mut runs = futures::stream::iter(members)
            .map(|(index, executor)| {
                let tx = tx.clone();
                async move {
                    // Checked when the host's turn comes, so a failure earlier in the batch
                    // keeps it from starting.
                    if fail_fast && stop.load(Ordering::Relaxed) {
                        return (index, None);
                    }
                    let _ = tx.send(Message::Started(index));
                    let began = tokio::time::Instant::now();
                    let mut attempt = 1;
                    loop {
                        // On the heap: an operation's future (a copy's reads and writes, a job's
                        // start) is large, and a debug build's test thread overflowed its stack.
                        // A refused or unresolvable host fails at once, as with ssh: the
                        // fleet's own retries are the explicit way to wait for one.
                        let attempted =
                            fleet_attempt(Box::pin(attempt_once(index, executor, tx.clone())))
                                .await;
                        let (outcome, pushed) = match attempted.map(Into::into) {
                            Ok(Attempted { execution, pushed }) => (Ok(execution), pushed),
                            Err(error) => (Err(error), None),
                        };
                        let status = HostStatus::of(&outcome);
                        if status.is_retryable()
                            && attempt <= self.retries
                            && let Err(error) = outcome
                        {
                            let delay = backoff(self.retry_backoff, attempt);
                            let _ = tx.send(Message::Retrying(index, attempt, error, delay));
                            tokio::time::sleep(delay).await;
                            attempt += 1;
                            continue;
                        }
                        if fail_fast && !status.is_ok() {
                            stop.store(true, Ordering::Relaxed);
                        }
                        if self.release_connections {
                            executor.release_connections().await;
                        }
                        let result = HostResult {
                            host: executor.host().to_owned(),
                            name: self.name(index).to_owned(),
                            port: executor.port(),
                            user: executor.inner.config.user.clone(),
                            member: index,
                            batch,
                            attempts: attempt,
                            outcome,
                            pushed,
                            started: began.duration_since(run_started),
                            duration: began.elapsed(),
                        };
                        return (index, Some(result));
                    }
                }
            })
            .buffer_unordered(self.concurrency);

        let mut results = Vec::with_capacity(range.len());
        let mut not_started = Vec::new();
        let deliver = |message: Message, on_event: &mut dyn FnMut(FleetEvent<'_>)| match message {
            Message::Started(member) => on_event(FleetEvent::Started {
                host: self.name(member),
                member,
            }),
            Message::Output(member, chunk) => on_event(FleetEvent::Output {
                host: self.name(member),
                member,
                chunk: &chunk,
            }),
            Message::Retrying(member, attempt, error, delay) => on_event(FleetEvent::Retrying {
                host: self.name(member),
                member,
                attempt,
                error: &error,
                delay,
            }),
        };
        loop {
            tokio::select! {
                biased;
                Some(message) = rx.recv() => deliver(message, on_event),
                next = runs.next() => match next {
                    Some((index, result)) => {
                        // Output sent before the result must be reported first.
                        while let Ok(message) = rx.try_recv() {
                            deliver(message, on_event);
                        }
                        match result {
                            Some(result) => {
                                on_event(FleetEvent::Finished { result: &result, member: index });
                                results.push(result);
                            }
                            None => not_started.push(index),
                        }
                    }
                    None => break,
                },
            }
        }
        results.sort_by_key(|r| r.member);
        not_started.sort_unstable();
        (results, not_started)
    }
}

/// `work` bounded by the per-host `deadline` (a deadline too far for the clock never passes),
/// its result's duration that of the attempt.
async fn bounded<T: Into<Attempted>>(
    deadline: Option<Duration>,
    host: &str,
    work: impl Future<Output = Result<T>>,
) -> Result<Attempted> {
    let tried = tokio::time::Instant::now();
    let outcome = match deadline {
        Some(deadline) => match limit::within(limit::deadline(tried, deadline), work).await {
            Some(outcome) => outcome.map(Into::into),
            None => Ok(summary_execution(
                host,
                ExitStatus::TimedOut {
                    timeout: deadline,
                    confirmed_dead: false,
                },
                String::new(),
            )
            .into()),
        },
        None => work.await.map(Into::into),
    };
    outcome.map(|mut attempted| {
        attempted.execution.duration = tried.elapsed();
        attempted
    })
}
