//! The registry: the connections to one host, slot placement, single-flight dialing and
//! retirement.

use std::{
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use crate::{
    config::Config,
    error::{Error, Phase, Result},
    pool::{
        session::{SLOW_START, Session},
        slot::Slot,
    },
    ssh::HopCache,
};

/// Counters kept by the registry.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) dials: AtomicU64,
    pub(crate) dial_failures: AtomicU64,
    pub(crate) dial_retries: AtomicU64,
    pub(crate) command_retries: AtomicU64,
    pub(crate) sessions_closed: AtomicU64,
    pub(crate) channel_open_retries: AtomicU64,
    pub(crate) channel_open_refusals: AtomicU64,
    pub(crate) sessions_recycled: AtomicU64,
    pub(crate) commands: AtomicU64,
    pub(crate) direct_requests: AtomicU64,
    pub(crate) direct_fallbacks: AtomicU64,
    pub(crate) kills: AtomicU64,
    pub(crate) spares_opened: AtomicU64,
    pub(crate) spares_used: AtomicU64,
    pub(crate) prestarted_used: AtomicU64,
    pub(crate) escalated_spares_used: AtomicU64,
    /// Streams of port forwards open right now, opened so far, and refused or failed.
    pub(crate) forward_streams_open: AtomicU64,
    pub(crate) forward_streams_opened: AtomicU64,
    pub(crate) forward_stream_failures: AtomicU64,
    /// Resident runners (`command::resident`): started, lost while running commands,
    /// connections where none could start, commands run through one.
    pub(crate) runners_started: AtomicU64,
    pub(crate) runners_lost: AtomicU64,
    pub(crate) runner_fallbacks: AtomicU64,
    pub(crate) runner_commands: AtomicU64,
    pub(crate) guarded_commands: AtomicU64,
    pub(crate) guard_refusals: AtomicU64,
    /// What the last runner to start runs on (`perl 5.036000`).
    pub(crate) runner: Mutex<Option<String>>,
}

/// Owns the connections to one host.
pub(crate) struct Registry {
    pub(crate) config: Arc<Config>,
    sessions: Mutex<Vec<Arc<Session>>>,
    dial_lock: tokio::sync::Mutex<()>,
    next_id: AtomicU64,
    last_dial_error: Mutex<Option<Arc<Error>>>,
    /// Slots a new connection starts with: `channels_per_connection`, lowered for good once
    /// the server has refused channels below it (so a recycled connection does not learn it
    /// again through refusals).
    pub(crate) learned_capacity: AtomicU32,
    /// The jump-host connections shared by this executor's connections.
    hop_cache: HopCache,
    pub(crate) counters: Counters,
    /// Woken when a slot may be placed without a dial: a connection's capacity grew, a slot
    /// was dropped, a connection was added (see [`Registry::place`]).
    pub(crate) room: tokio::sync::Notify,
    /// Callers waiting for a slot right now (see [`Waiting`]).
    waiting: AtomicU32,
    /// How long a dial takes here, smoothed (microseconds; 0 before the first one).
    dial_micros: AtomicU64,
    /// When the last dial ended (successful or not).
    last_dial_end: Mutex<Option<Instant>>,
    /// Connections dialed for port forwards ([`dial_detached`](Self::dial_detached)), which
    /// carry no commands: counted in the statistics and closed with the others.
    detached: Mutex<Vec<std::sync::Weak<Session>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("sessions", &*self.lock_sessions())
            .finish_non_exhaustive()
    }
}

impl Registry {
    pub(crate) fn new(config: Arc<Config>) -> Self {
        Self {
            sessions: Mutex::new(Vec::new()),
            dial_lock: tokio::sync::Mutex::new(()),
            next_id: AtomicU64::new(1),
            last_dial_error: Mutex::new(None),
            learned_capacity: AtomicU32::new(config.channels_per_connection),
            hop_cache: HopCache::default(),
            counters: Counters::default(),
            room: tokio::sync::Notify::new(),
            waiting: AtomicU32::new(0),
            dial_micros: AtomicU64::new(0),
            last_dial_end: Mutex::new(None),
            detached: Mutex::new(Vec::new()),
            config,
        }
    }

    pub(crate) fn lock_sessions(&self) -> MutexGuard<'_, Vec<Arc<Session>>> {
        // A poisoned lock only means another thread panicked mid-update of a plain Vec.
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A connection learned that the server allows only `capacity` channels: the others
    /// (same server, same limit) and new ones take no more either.
    pub(crate) fn learn_capacity(&self, capacity: u32) {
        let before = self.learned_capacity.fetch_min(capacity, Ordering::AcqRel);
        if capacity < before {
            for session in self.lock_sessions().iter() {
                session.capacity.fetch_min(capacity, Ordering::AcqRel);
            }
        }
    }

    /// Live sessions that still take new work.
    pub(crate) fn sessions(&self) -> Vec<Arc<Session>> {
        self.lock_sessions().clone()
    }

    /// Places a slot on the least-loaded connection with room, without I/O.
    fn try_place(self: &Arc<Self>) -> Option<Slot> {
        let max_lifetime = self.config.max_connection_lifetime;
        let mut sessions = self.lock_sessions();
        self.prune(&mut sessions);
        let best = sessions
            .iter()
            .filter(|s| {
                s.accepts_work(max_lifetime)
                    && s.slots.load(Ordering::Acquire) < s.capacity.load(Ordering::Acquire)
            })
            .min_by_key(|s| s.slots.load(Ordering::Acquire))?
            .clone();
        best.slots.fetch_add(1, Ordering::AcqRel);
        Some(Slot::new(best, self.clone()))
    }

    /// Drops sessions that are dead or retired and carry no slot, disconnecting them.
    pub(crate) fn prune(&self, sessions: &mut Vec<Arc<Session>>) {
        sessions.retain(|s| {
            let finished = (s.is_dead() || s.is_retired()) && s.slots.load(Ordering::Acquire) == 0;
            if finished {
                self.counters
                    .sessions_closed
                    .fetch_add(1, Ordering::Relaxed);
                spawn_disconnect(s.clone());
            }
            !finished
        });
    }

    fn has_room(&self) -> bool {
        let max_lifetime = self.config.max_connection_lifetime;
        self.lock_sessions().iter().any(|s| {
            s.accepts_work(max_lifetime)
                && s.slots.load(Ordering::Acquire) < s.capacity.load(Ordering::Acquire)
        })
    }

    fn working_sessions(&self) -> usize {
        let max_lifetime = self.config.max_connection_lifetime;
        self.lock_sessions()
            .iter()
            .filter(|s| s.accepts_work(max_lifetime))
            .count()
    }

    /// Places a slot, dialing a new connection (single-flight) when none has room and callers
    /// have waited about [`DIAL_PATIENCE`] times as long as a dial takes.
    ///
    /// Why wait before dialing another connection: room often comes sooner. A new connection
    /// starts small and grows with each open (slow start), and short commands hand their
    /// slots back to waiting callers within milliseconds. A dial costs a handshake on both
    /// sides; measured on the benchmark's 2-core machine, 64 cold callers took 0.41 s when
    /// every full connection triggered the next dial at once (4 handshakes one after another,
    /// competing with the commands for CPU). Waiting a couple of dial times before paying for
    /// one bounds the loss either way: at most that for callers behind long commands, at most
    /// one wasted handshake for short ones. Only without any live
    /// connection is the dial immediate.
    pub(crate) async fn place(self: &Arc<Self>) -> Result<Slot> {
        let entered = Instant::now();
        loop {
            let room = self.room.notified();
            if let Some(slot) = self.try_place() {
                return Ok(slot);
            }
            if self.working_sessions() > 0 {
                let since = self.last_dial_end().map_or(entered, |end| end.max(entered));
                let patience = self.dial_time() * DIAL_PATIENCE;
                if since.elapsed() < patience {
                    let left = patience.saturating_sub(since.elapsed());
                    let _ = tokio::time::timeout(left.min(Duration::from_millis(10)), room).await;
                    continue;
                }
                if self.waiting.load(Ordering::Acquire) == 0 {
                    // Nobody needs the slot any more (they got returned ones): no dial. bb8
                    // only logs this and asks again later if it still wants one.
                    return Err(Error::Config {
                        reason: "no caller waits for a new connection".to_owned(),
                    });
                }
            }
            let dial_end_seen = self.last_dial_end();
            let _dialing = self.lock_dialing().await?;
            if let Some(slot) = self.try_place() {
                return Ok(slot);
            }
            if self.working_sessions() > 0 && self.last_dial_end() != dial_end_seen {
                // Another dial ended while this one queued: give its room a chance first.
                continue;
            }
            if self.working_sessions() >= self.config.max_connections as usize {
                return Err(Error::Config {
                    reason: "all connections are full (the server refused channels below \
                             channels_per_connection)"
                        .to_owned(),
                });
            }
            let session = self.dial().await?;
            session.slots.fetch_add(1, Ordering::AcqRel);
            self.lock_sessions().push(session.clone());
            self.room.notify_waiters();
            return Ok(Slot::new(session, self.clone()));
        }
    }

    /// How long dials to this host take (smoothed), zero before the first.
    fn dial_time(&self) -> Duration {
        Duration::from_micros(self.dial_micros.load(Ordering::Acquire))
    }

    fn last_dial_end(&self) -> Option<Instant> {
        *self
            .last_dial_end
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn note_dial_end(&self, took: Option<Duration>) {
        if let Some(took) = took {
            let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
            let before = self.dial_micros.load(Ordering::Acquire);
            // An average that follows the load: half the last dial, half the history.
            let smoothed = if before == 0 {
                took
            } else {
                before / 2 + took / 2
            };
            self.dial_micros.store(smoothed, Ordering::Release);
        }
        *self
            .last_dial_end
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
    }

    /// Counts a caller waiting for a slot while the returned guard lives.
    pub(crate) fn waiting(self: &Arc<Self>) -> Waiting {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        Waiting(self.clone())
    }

    /// Takes the single-flight dial lock, waiting at most `connect_timeout`: another
    /// caller's dial takes at most that long, so a longer wait means dials keep failing, and
    /// the caller gets a timeout instead of queueing behind one failed dial after another.
    async fn lock_dialing(&self) -> Result<tokio::sync::MutexGuard<'_, ()>> {
        tokio::time::timeout(self.config.connect_timeout, self.dial_lock.lock())
            .await
            .map_err(|_| Error::Timeout {
                host: self.config.host.clone(),
                port: self.config.port,
                phase: Phase::Connect,
                after: self.config.connect_timeout,
            })
    }

    /// Dials a connection. A transient failure ([`is_transient`]: the server refused or
    /// dropped the connection, as a restarting sshd does) is retried with exponential backoff
    /// (25 ms doubling to 1 s, ±50 % jitter so that many executors do not retry in step)
    /// until `connect_timeout` has passed since the first attempt; authentication and
    /// host-key refusals, bad settings and timeouts are not retried. Within
    /// [`fleet_attempt`], a TCP connect that fails (refused, reset, a name that does not
    /// resolve) is not retried either.
    async fn dial(&self) -> Result<Arc<Session>> {
        let started = Instant::now();
        let mut delay = Duration::from_millis(25);
        loop {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            self.counters.dials.fetch_add(1, Ordering::Relaxed);
            // Each attempt gets what is left of the one budget, so retries never stretch it.
            let attempt_started = Instant::now();
            let left = self
                .config
                .connect_timeout
                .saturating_sub(started.elapsed());
            let attempt =
                tokio::time::timeout(left, Session::dial(&self.config, &self.hop_cache, id))
                    .await
                    .unwrap_or_else(|_| {
                        Err(Error::Timeout {
                            host: self.config.host.clone(),
                            port: self.config.port,
                            phase: Phase::Connect,
                            after: self.config.connect_timeout,
                        })
                    });
            let error = match attempt {
                Ok(session) => {
                    self.note_dial_end(Some(attempt_started.elapsed()));
                    if let Ok(mut last) = self.last_dial_error.lock() {
                        *last = None;
                    }
                    let learned = self.learned_capacity.load(Ordering::Acquire);
                    session
                        .capacity
                        .fetch_min(learned.min(SLOW_START), Ordering::AcqRel);
                    return Ok(Arc::new(session));
                }
                Err(error) => error,
            };
            self.counters.dial_failures.fetch_add(1, Ordering::Relaxed);
            self.note_dial_end(None);
            // Recorded at once, retried or not: a caller whose deadline passes while the dial
            // is being retried reports it (see `Error::PoolTimeout`).
            if let Ok(mut last) = self.last_dial_error.lock() {
                *last = Some(Arc::new(Error::Config {
                    reason: error.to_string(),
                }));
            }
            let pause = delay.mul_f64(rand::random_range(0.5..1.5));
            let fail_fast = matches!(error, Error::Connect { .. }) && in_fleet_attempt();
            if is_transient(&error)
                && !fail_fast
                && started.elapsed().saturating_add(pause) < self.config.connect_timeout
            {
                tracing::debug!(host = %self.config.host, port = self.config.port, %error,
                    retry_in = ?pause, "connection attempt failed; retrying");
                self.counters.dial_retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(pause).await;
                delay = (delay * 2).min(Duration::from_secs(1));
                continue;
            }
            tracing::warn!(host = %self.config.host, port = self.config.port, %error,
                "connection attempt failed");
            return Err(error);
        }
    }

    /// Dials in the caller's task when the pool cannot serve the next request from existing
    /// connections, so that connection errors reach the caller typed and at once.
    ///
    /// Only without a live connection: with one, the pool's own placement decides when
    /// another is worth dialing ([`place`](Self::place)), and its errors are recorded for
    /// [`Error::PoolTimeout`].
    pub(crate) async fn dial_if_needed(&self, idle_slots: u32) -> Result<()> {
        if idle_slots > 0 || self.has_room() || self.working_sessions() > 0 {
            return Ok(());
        }
        let _dialing = self.lock_dialing().await?;
        // Callers queue here behind the first dial; once it has connected, the rest leave
        // further dials to `place` (a full new connection is no reason to dial again at once).
        if self.working_sessions() > 0 {
            return Ok(());
        }
        let session = self.dial().await?;
        self.lock_sessions().push(session);
        self.room.notify_waiters();
        Ok(())
    }

    /// Dials a connection of its own for a caller that does not run commands on it (port
    /// forwards), with the same settings, jump hosts and retries as the pool's. It is not
    /// placed in the pool; [`close_all`](Self::close_all) disconnects it too.
    pub(crate) async fn dial_detached(&self) -> Result<Arc<Session>> {
        let session = self.dial().await?;
        let mut detached = self
            .detached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        detached.retain(|session| session.strong_count() > 0);
        detached.push(Arc::downgrade(&session));
        Ok(session)
    }

    /// The live connections dialed with [`dial_detached`](Self::dial_detached).
    pub(crate) fn detached_sessions(&self) -> Vec<Arc<Session>> {
        self.detached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .filter(|session| !session.is_dead())
            .collect()
    }

    pub(crate) fn last_dial_error(&self) -> Option<Arc<Error>> {
        self.last_dial_error.lock().ok().and_then(|e| e.clone())
    }

    /// Marks every connection retired and disconnects those without running commands.
    pub(crate) async fn close_all(&self) {
        let sessions = self.sessions();
        for session in &sessions {
            session.retire();
        }
        // Idle slots in the pool do not keep a connection open; running commands do (their
        // `Running` guard disconnects when the last one ends).
        for session in sessions {
            if session.running.load(Ordering::Acquire) == 0 {
                session.disconnect().await;
            }
        }
        // Port forwards' connections: their streams end with an error, their listeners
        // stop taking new ones (`forwards`).
        for session in self.detached_sessions() {
            session.retire();
            session.disconnect().await;
        }
    }
}

/// How many dial times callers wait for room before another connection is dialed (see
/// [`Registry::place`]). Two, not one: a handshake also takes server CPU from the running
/// commands, about as much as its own duration on the benchmark's 2-core machine. With one
/// dial time, 64 cold callers dialed a second connection that was ready only when the last
/// of them finished (0.26–0.29 s, against 0.21–0.27 s for one connection).
const DIAL_PATIENCE: u32 = 2;

/// A caller waiting for a slot (see [`Registry::waiting`]).
#[derive(Debug)]
pub(crate) struct Waiting(Arc<Registry>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

fn spawn_disconnect(session: Arc<Session>) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move { session.disconnect().await });
    }
}

tokio::task_local! {
    /// Set around a fleet's attempt on one host ([`fleet_attempt`]).
    static FLEET_ATTEMPT: bool;
}

/// Runs `work` as one host's attempt in a fleet, which differs from a lone executor's work
/// in two ways:
///
/// * **Dials do not retry a failed TCP connect.** A single executor rides through an sshd
///   restart by retrying a refused connect until its connect timeout; a fleet wants the
///   opposite: a host whose port refuses (or whose name does not resolve) is down, and
///   reporting it takes what it takes `ssh`, not the connect timeout. Waiting for a rebooting
///   host stays the fleet's explicit retries. The server dropping an accepted connection
///   during the handshake (sshd's `MaxStartups`) is still retried.
/// * **No resident runner is started under [`Runner::Auto`](crate::Runner::Auto)** (one
///   already running is used): a fleet runs one command, or a few, per host, for which a
///   runner's start is one exec more, not one fewer (BENCHMARKS.md, the fleet rows).
///   [`Runner::Resident`](crate::Runner::Resident) still starts one.
///
/// Work in `work`'s task sees it, and so do the tasks it starts through
/// [`keeping_attempt_policy`] (a command's driver, which dials the pool's first connection
/// and asks for the runner).
pub(crate) fn fleet_attempt<F: std::future::Future>(
    work: F,
) -> impl std::future::Future<Output = F::Output> {
    FLEET_ATTEMPT.scope(true, work)
}

/// `work` with the attempt policy of the calling task, for a task spawned on its behalf.
pub(crate) fn keeping_attempt_policy<F: std::future::Future>(
    work: F,
) -> impl std::future::Future<Output = F::Output> {
    FLEET_ATTEMPT.scope(in_fleet_attempt(), work)
}

/// Whether the calling task is a fleet's attempt ([`fleet_attempt`]).
pub(crate) fn in_fleet_attempt() -> bool {
    FLEET_ATTEMPT
        .try_with(|in_attempt| *in_attempt)
        .unwrap_or(false)
}

/// Whether a failed dial may well succeed if tried again shortly: the server was not
/// listening or dropped the connection during the handshake or authentication (a restarting
/// or overloaded sshd, `MaxStartups`). Not: refused credentials, host-key problems, settings,
/// or a timeout (which has used up the budget already).
pub(crate) fn is_transient(error: &Error) -> bool {
    match error {
        Error::Connect { .. } => true,
        Error::Ssh {
            phase: Phase::Connect | Phase::Handshake | Phase::Auth,
            source,
            ..
        } => matches!(
            source,
            russh::Error::Disconnect
                | russh::Error::HUP
                | russh::Error::IO(_)
                | russh::Error::SendError
                | russh::Error::ConnectionTimeout
        ),
        _ => false,
    }
}
