//! The connection pool: bb8 pools *channel slots*; a registry places them on connections.
//!
//! # Why not pool connections directly
//!
//! bb8 hands out each pooled object exclusively. An SSH connection, however, multiplexes many
//! channels: pooling whole connections made four callers on two connections take twice as
//! long as one connection needed. So the unit bb8 manages here is a [`Slot`]: the right to
//! run one command (one session channel) on a particular connection.
//!
//! * bb8 does what it is good at: the FIFO wait queue with its timeout
//!   ([`pool_wait_timeout`](crate::SshExecutorBuilder::pool_wait_timeout)), cancellation-safe
//!   checkout (a slot is owned by a `PooledConnection` before any `.await`), idle reaping and
//!   statistics. `max_size` = `max_connections × channels_per_connection`.
//! * The [`Registry`] does what bb8 cannot express: several slots sharing one connection,
//!   least-loaded placement, single-flight dialing, and retiring old connections.
//!   Placing a slot on an existing connection does no network I/O.
//!
//! # Errors reach the caller
//!
//! bb8 dials in background tasks and reports only a timeout to `get()`. So when no slot is
//! idle and no connection has room, the *caller's* task dials first
//! ([`Registry::dial_if_needed`]): a wrong host key or refused login comes back at once as a
//! typed error rather than as a pool timeout. Later dial errors are recorded and attached to
//! [`Error::PoolTimeout`].
//!
//! # Channel slots and OpenSSH
//!
//! OpenSSH allows `MaxSessions` (10) channels per connection and frees a slot some time
//! after the channel closes. The default of 8 slots per connection leaves room for the kill
//! channel and the SFTP channel, and a refused open is retried with backoff (1 ms doubling to
//! 50 ms, 10 tries) before the slot is discarded and the connection's capacity lowered; new
//! connections start with the lowered capacity too, so a server with a smaller `MaxSessions`
//! costs refusals once per executor, not once per connection.
//!
//! # Recycling
//!
//! Refused opens cost memory: russh 0.65 answers each one with a reply on the connection's
//! handle that only authentication ever reads, about 0.5 KiB held until the connection
//! closes. Under churn about one open in a hundred is refused, so a connection is retired
//! after 128 refusals and a fresh one dialed when needed ([`PoolStats::connections_recycled`]);
//! the soak test measured 100,000 commands staying within its memory bound this way.

use std::{
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::Duration,
};

use crate::{
    builder::Config,
    error::{Error, Phase, Result},
    session::{self, Session},
};

/// Counters kept by the registry.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) dials: AtomicU64,
    pub(crate) dial_failures: AtomicU64,
    pub(crate) sessions_closed: AtomicU64,
    pub(crate) channel_open_retries: AtomicU64,
    pub(crate) sessions_recycled: AtomicU64,
    pub(crate) commands: AtomicU64,
    pub(crate) kills: AtomicU64,
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
    learned_capacity: AtomicU32,
    pub(crate) counters: Counters,
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
            counters: Counters::default(),
            config,
        }
    }

    fn lock_sessions(&self) -> MutexGuard<'_, Vec<Arc<Session>>> {
        // A poisoned lock only means another thread panicked mid-update of a plain Vec.
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
        Some(Slot {
            session: best,
            registry: self.clone(),
            broken: false,
        })
    }

    /// Drops sessions that are dead or retired and carry no slot, disconnecting them.
    fn prune(&self, sessions: &mut Vec<Arc<Session>>) {
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

    /// Places a slot, dialing a new connection (single-flight) when none has room.
    async fn place(self: &Arc<Self>) -> Result<Slot> {
        if let Some(slot) = self.try_place() {
            return Ok(slot);
        }
        let _dialing = self.dial_lock.lock().await;
        if let Some(slot) = self.try_place() {
            return Ok(slot);
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
        Ok(Slot {
            session,
            registry: self.clone(),
            broken: false,
        })
    }

    async fn dial(&self) -> Result<Arc<Session>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.counters.dials.fetch_add(1, Ordering::Relaxed);
        match session::dial(&self.config, id).await {
            Ok(session) => {
                let learned = self.learned_capacity.load(Ordering::Acquire);
                session.capacity.fetch_min(learned, Ordering::AcqRel);
                Ok(Arc::new(session))
            }
            Err(e) => {
                self.counters.dial_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(host = %self.config.host, port = self.config.port, error = %e,
                    "connection attempt failed");
                let message = Error::Config {
                    reason: e.to_string(),
                };
                if let Ok(mut last) = self.last_dial_error.lock() {
                    *last = Some(Arc::new(message));
                }
                Err(e)
            }
        }
    }

    /// Dials in the caller's task when the pool cannot serve the next request from existing
    /// connections, so that connection errors reach the caller typed and at once.
    pub(crate) async fn dial_if_needed(&self, idle_slots: u32) -> Result<()> {
        if idle_slots > 0 || self.has_room() {
            return Ok(());
        }
        let _dialing = self.dial_lock.lock().await;
        if self.has_room() || self.working_sessions() >= self.config.max_connections as usize {
            return Ok(());
        }
        let session = self.dial().await?;
        self.lock_sessions().push(session);
        Ok(())
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
    }
}

fn spawn_disconnect(session: Arc<Session>) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move { session.disconnect().await });
    }
}

/// The right to run one command on one connection. Returned to the pool when dropped.
pub(crate) struct Slot {
    pub(crate) session: Arc<Session>,
    registry: Arc<Registry>,
    broken: bool,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("session", &self.session.id)
            .field("broken", &self.broken)
            .finish()
    }
}

impl Slot {
    /// Makes the pool discard this slot instead of reusing it.
    pub(crate) fn mark_broken(&mut self) {
        self.broken = true;
    }

    fn unusable(&self) -> bool {
        self.broken || self.session.is_dead() || self.session.is_retired()
    }

    /// Opens a session channel, retrying while the server refuses for lack of free sessions.
    pub(crate) async fn open_channel(&mut self) -> Result<russh::Channel<russh::client::Msg>> {
        let config = &self.registry.config;
        let result = open_channel(&self.session, config, &self.registry.counters).await;
        match &result {
            Ok(_) => {}
            Err(Error::ChannelRefused { .. }) => {
                // The server holds fewer sessions than configured: stop placing that many here.
                let capacity = &self.session.capacity;
                let current = capacity.load(Ordering::Acquire);
                if current > 1 {
                    let _ = capacity.compare_exchange(
                        current,
                        current - 1,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    );
                    self.registry
                        .learned_capacity
                        .fetch_min(current - 1, Ordering::AcqRel);
                }
                self.mark_broken();
            }
            Err(_) => self.mark_broken(),
        }
        result
    }
}

/// Opens a session channel on `session`, retrying `ChannelOpenFailure` with backoff.
pub(crate) async fn open_channel(
    session: &Session,
    config: &Config,
    counters: &Counters,
) -> Result<russh::Channel<russh::client::Msg>> {
    const ATTEMPTS: u32 = 10;
    let mut delay = Duration::from_millis(1);
    for attempt in 1..=ATTEMPTS {
        match tokio::time::timeout(
            config.connect_timeout,
            session.handle.channel_open_session(),
        )
        .await
        {
            Ok(Ok(channel)) => return Ok(channel),
            Ok(Err(russh::Error::ChannelOpenFailure(_))) if attempt < ATTEMPTS => {
                note_refused_open(session, counters);
                counters
                    .channel_open_retries
                    .fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(50));
            }
            Ok(Err(russh::Error::ChannelOpenFailure(_))) => {
                note_refused_open(session, counters);
                break;
            }
            Ok(Err(source)) => {
                return Err(Error::Ssh {
                    host: config.host.clone(),
                    port: config.port,
                    phase: Phase::ChannelOpen,
                    source,
                });
            }
            Err(_) => {
                return Err(Error::Timeout {
                    host: config.host.clone(),
                    port: config.port,
                    phase: Phase::ChannelOpen,
                    after: config.connect_timeout,
                });
            }
        }
    }
    Err(Error::ChannelRefused {
        host: config.host.clone(),
        port: config.port,
        attempts: ATTEMPTS,
    })
}

fn note_refused_open(session: &Session, counters: &Counters) {
    if session.note_refused_open() {
        counters.sessions_recycled.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let left = self
            .session
            .slots
            .fetch_sub(1, Ordering::AcqRel)
            .saturating_sub(1);
        if left == 0 {
            // The last slot of a connection went (idle reaping, retirement or breakage):
            // close the connection instead of keeping an unused one open.
            self.session.retire();
            let mut sessions = self.registry.lock_sessions();
            self.registry.prune(&mut sessions);
        }
    }
}

/// bb8's view of the registry.
#[derive(Debug)]
pub(crate) struct SlotManager {
    pub(crate) registry: Arc<Registry>,
}

impl bb8::ManageConnection for SlotManager {
    type Connection = Slot;
    type Error = Error;

    fn connect(&self) -> impl Future<Output = Result<Slot>> + Send {
        let registry = self.registry.clone();
        async move { registry.place().await }
    }

    fn is_valid(&self, slot: &mut Slot) -> impl Future<Output = Result<()>> + Send {
        let unusable = slot.unusable();
        let (host, port) = (self.registry.config.host.clone(), self.registry.config.port);
        async move {
            if unusable {
                Err(Error::ConnectionLost { host, port })
            } else {
                Ok(())
            }
        }
    }

    fn has_broken(&self, slot: &mut Slot) -> bool {
        slot.unusable()
    }
}

/// Records background dial errors (bb8 only logs them otherwise).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogSink;

impl bb8::ErrorSink<Error> for LogSink {
    fn sink(&self, error: Error) {
        tracing::debug!(%error, "pool background error");
    }

    fn boxed_clone(&self) -> Box<dyn bb8::ErrorSink<Error>> {
        Box::new(*self)
    }
}

/// A snapshot of the pool, from [`SshExecutor::pool_stats`](crate::SshExecutor::pool_stats).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PoolStats {
    /// Open connections.
    pub connections: usize,
    /// Open connections that take no new commands and close once their running commands
    /// end: they reached the maximum lifetime, or are being recycled.
    pub retiring_connections: usize,
    /// Channel slots placed on connections (busy plus idle).
    pub slots: u32,
    /// Slots idle in the pool.
    pub idle_slots: u32,
    /// Commands running right now.
    pub busy_slots: u32,
    /// Connections dialed so far.
    pub dials: u64,
    /// Dials that failed.
    pub dial_failures: u64,
    /// Connections closed (dead, retired or idle).
    pub connections_closed: u64,
    /// Channel opens the server refused and that were retried.
    pub channel_open_retries: u64,
    /// Connections replaced after many refused channel opens (russh keeps about 0.5 KiB per
    /// refusal until the connection closes).
    pub connections_recycled: u64,
    /// Commands started.
    pub commands: u64,
    /// Remote process groups killed (timeouts and cancellations).
    pub kills: u64,
    /// Slot checkouts that had to wait.
    pub waits: u64,
    /// Slot checkouts that timed out.
    pub wait_timeouts: u64,
    /// Total time spent waiting for slots.
    pub wait_time: Duration,
}
