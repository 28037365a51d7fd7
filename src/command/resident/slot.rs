//! What a connection keeps about its runners, and the choice each command makes: the
//! runner that is up, or one session per command while a runner starts (in the background
//! under [`Runner::Auto`], so that no command waits for a start), or for good where none can.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;

use super::{
    Resident,
    start::{Start, Starter},
};
use crate::{
    command::escalation::Exchange,
    config::{Config, Runner},
    error::Error,
    pool::{self, Counters, Pool, Session},
};

/// Whether a command runs through a runner on its connection.
pub(crate) enum Choice {
    Use(Arc<Resident>),
    /// No runner here (yet, or for good): the per-exec path.
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

/// The first wait before a background start whose channel the server refused is tried
/// again; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// What a connection keeps about one of its runners.
#[derive(Default)]
struct RunnerSlot {
    /// The runner, once one answered.
    ready: Mutex<Option<Arc<Resident>>>,
    /// Held by the start in flight (a background start's task holds it owned): one at a
    /// time per connection and identity, and the commands that come meanwhile wait on it.
    starting: Arc<tokio::sync::Mutex<()>>,
    /// Why no runner could start here: the connection's commands go per exec for good.
    refused: Mutex<Option<String>>,
    /// No background start before then (the server refused the last one's channel), and the
    /// wait after the next refusal.
    retry: Mutex<Option<(Instant, Duration)>>,
    /// An escalation that may prompt has handed over per exec on this connection: its
    /// credential is good, so a start through it costs no failed attempt.
    proven: AtomicBool,
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

    /// What a start decided already: the runner, or why there is none.
    fn decided(&self, config: &Config) -> Option<Choice> {
        match (self.ready(), self.refused()) {
            (Some(runner), _) => Some(Choice::Use(runner)),
            (None, Some(reason)) => Some(unavailable(config, reason)),
            (None, None) => None,
        }
    }

    /// Whether a background start may begin now on `session`: none in flight or waiting
    /// out a refusal; the connection has a channel to spare (its learned capacity, which a
    /// server's `MaxSessions` lowers); and an escalation that may prompt has shown on this
    /// connection that its password is good.
    fn may_start(&self, session: &Session, escalation: Option<&Exchange>) -> bool {
        let waiting = self
            .retry
            .lock()
            .ok()
            .and_then(|retry| *retry)
            .is_some_and(|(after, _)| Instant::now() < after);
        let room = session.open_channels.load(Ordering::Acquire)
            < session.capacity.load(Ordering::Acquire);
        let unproven =
            escalation.is_some_and(Exchange::payload_waits) && !self.proven.load(Ordering::Acquire);
        !waiting && room && !unproven
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
            Start::Refused(reason) => self.refuse(reason, config, counters),
            // The connection died under the start, or the escalation failed as it would per
            // exec (the next command asks again): nothing to keep.
            Start::Retry(_) | Start::Fail(_) => {}
        }
    }

    fn refuse(&self, reason: &str, config: &Config, counters: &Counters) {
        counters.runner_fallbacks.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(host = %config.host, %reason,
            "no resident runner on this connection; commands run per exec");
        if let Ok(mut refused) = self.refused.lock() {
            *refused = Some(reason.to_owned());
        }
    }

    /// Keeps what a background start gave: as [`record`](Self::record), and a refused
    /// channel waits out a growing pause; a failed escalation (which the commands per exec
    /// meet on their own) is not tried again on this connection.
    fn record_background(&self, outcome: &Start, config: &Config, counters: &Counters) {
        match outcome {
            Start::Retry(error) => {
                tracing::debug!(host = %config.host, %error, "the runner's start found no channel; commands run per exec meanwhile");
                if let Ok(mut retry) = self.retry.lock() {
                    let wait = retry.map_or(RETRY_FIRST, |(_, last)| (last * 2).min(RETRY_MAX));
                    *retry = Some((Instant::now() + wait, wait));
                }
            }
            Start::Fail(error) => self.refuse(&error.to_string(), config, counters),
            _ => self.record(outcome, config, counters),
        }
    }
}

/// What a command does where no runner can start: per exec, or under
/// [`Runner::Resident`] fail with [`Error::RunnerUnavailable`].
fn unavailable(config: &Config, reason: String) -> Choice {
    match config.runner {
        Runner::Resident => Choice::Fail(Error::RunnerUnavailable {
            host: config.host.clone(),
            port: config.port,
            reason,
        }),
        _ => Choice::PerExec,
    }
}

/// The runner of `session` that runs as `escalation`'s target (`None`: as the login).
///
/// Under [`Runner::Auto`] the command that finds no runner does not wait for one: it goes
/// per exec, and sets the start off in the background (when the connection has a channel
/// to spare). The commands that come while that start runs wait for it, as they would for a
/// channel of their own on a busy connection: a burst on a fresh connection then opens no
/// channel beyond the first (a server with few sessions refuses none). Under
/// [`Runner::Resident`] the command waits for the start too.
pub(crate) async fn runner_for(
    pool: &Arc<Pool>,
    session: &Arc<Session>,
    escalation: Option<&Exchange>,
    need: Need,
) -> Choice {
    let config = &pool.config;
    let slot = session.extensions.get::<RunnerSlots>().slot(escalation);
    if let Some(choice) = slot.decided(config) {
        return choice;
    }
    match config.runner {
        // A fleet's one command (or few) per host: a runner's start would cost more than it
        // saves (see `pool::fleet_attempt`). Not refused: the connection's later work may
        // start one.
        Runner::Auto if need == Need::Preferred && pool::in_fleet_attempt() => Choice::PerExec,
        Runner::Auto if need == Need::Preferred => {
            if set_off(pool, session, escalation, &slot) != SetOff::InFlight {
                return Choice::PerExec;
            }
            // A start in flight: its runner (or per exec, if it finds none).
            let _started = slot.starting.lock().await;
            slot.decided(config).unwrap_or(Choice::PerExec)
        }
        _ => start_and_wait(pool, session, escalation, &slot).await,
    }
}

/// How much a request needs a runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// It runs per exec as well: under [`Runner::Auto`] it waits for no start.
    Preferred,
    /// Only a runner can run it (a guarded command): it waits for the start.
    Required,
}

/// What [`set_off`] found.
#[derive(PartialEq, Eq)]
enum SetOff {
    /// It set a start off in the background, or none may begin now.
    NotWaiting,
    /// A start was in flight already.
    InFlight,
}

/// Starts the runner of `slot` in a task of its own (which holds `starting` until it ends),
/// unless a start is in flight or none may begin now (see [`RunnerSlot::may_start`]).
fn set_off(
    pool: &Arc<Pool>,
    session: &Arc<Session>,
    escalation: Option<&Exchange>,
    slot: &Arc<RunnerSlot>,
) -> SetOff {
    let Ok(starting) = slot.starting.clone().try_lock_owned() else {
        return SetOff::InFlight;
    };
    if !slot.may_start(session, escalation) {
        return SetOff::NotWaiting;
    }
    let (pool, session, slot) = (pool.clone(), session.clone(), slot.clone());
    let escalation = escalation.cloned();
    tokio::spawn(async move {
        let _starting = starting;
        let counters = &pool.registry.counters;
        let outcome = Starter {
            session: &session,
            config: &pool.config,
            counters,
            escalation: escalation.as_ref(),
            patient: false,
        }
        .start()
        .await;
        slot.record_background(&outcome, &pool.config, counters);
    });
    SetOff::NotWaiting
}

/// Starts the runner of `slot` and waits for it (or for the start in flight).
async fn start_and_wait(
    pool: &Arc<Pool>,
    session: &Arc<Session>,
    escalation: Option<&Exchange>,
    slot: &RunnerSlot,
) -> Choice {
    let config = &pool.config;
    let counters = &pool.registry.counters;
    let _starting = slot.starting.lock().await;
    // A start that ended while this one waited for the lock decided already.
    if let Some(choice) = slot.decided(config) {
        return choice;
    }
    let outcome = Starter {
        session,
        config,
        counters,
        escalation,
        patient: true,
    }
    .start()
    .await;
    slot.record(&outcome, config, counters);
    match outcome {
        Start::Ready(runner) => Choice::Use(runner),
        Start::Refused(reason) => unavailable(config, reason),
        Start::Retry(error) => Choice::Retry(error),
        Start::Fail(error) => Choice::Fail(error),
    }
}

/// Notes that `escalation` handed over per exec on `session` (its credential is good), and
/// under [`Runner::Auto`] sets the runner's start through it off at once, so that it runs
/// beside the rest of the command that proved it.
pub(crate) fn note_escalated(pool: &Arc<Pool>, session: &Arc<Session>, escalation: &Exchange) {
    let slot = session
        .extensions
        .get::<RunnerSlots>()
        .slot(Some(escalation));
    let proven_before = slot.proven.swap(true, Ordering::AcqRel);
    if !proven_before
        && pool.config.runner == Runner::Auto
        && !pool::in_fleet_attempt()
        && slot.decided(&pool.config).is_none()
    {
        set_off(pool, session, Some(escalation), &slot);
    }
}
