//! The connection pool: bb8 pools *channel slots*; a registry places them on connections.
//!
//! # Why not pool connections directly
//!
//! bb8 hands out each pooled object exclusively. An SSH connection, however, multiplexes many
//! channels: pooling whole connections made four callers on two connections take twice as
//! long as one connection needed. So the unit bb8 manages here is a `Slot`: the right to
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
//! bb8 dials in background tasks and reports only a timeout to `get()`. So when there is no
//! live connection, the *caller's* task dials first ([`Registry::dial_if_needed`]; callers
//! that arrive meanwhile wait for that one dial): a wrong host key or refused login comes back
//! at once as a typed error rather than as a pool timeout. Later dial errors are recorded and
//! attached to [`Error::PoolTimeout`].
//!
//! # When to dial another connection
//!
//! With a live connection and no room on it, another connection is dialed only when callers
//! are still waiting after about two dial times (smoothed over the dials so far;
//! [`Registry::place`]). Room usually comes sooner: a new connection grows with each open
//! (slow start, below), and short commands hand their slots back within milliseconds, while a
//! handshake takes server CPU from the running commands. Dialing whenever every connection
//! was full made 64 cold callers dial 4 connections one after another (benchmark `coldstart`,
//! `--quick`, load average 3–4: 0.43 s); with the wait 0.27–0.29 s, the same as with
//! `max_connections(1)` (asyncssh with one connection: 0.21–0.24 s in the same runs; the rest is
//! the server's work per command). Callers behind long commands wait at most the two dial
//! times for a second connection; a burst of short ones wastes at most one handshake.

//! # Channel slots and OpenSSH
//!
//! OpenSSH allows `MaxSessions` (10) channels per connection and frees a slot some time
//! after the channel closes. The default of 8 slots per connection leaves room for the kill
//! channel and the SFTP channel. A refused open lowers the connection's capacity to the
//! channels open on it ([`Session::learn_from_refusal`]), for every connection to the host
//! and for new ones; a slot beyond the capacity is given up and its command waits in the pool
//! for another, while a refusal below it (a just-closed channel not freed yet) is retried with
//! backoff (1 ms doubling to 50 ms, 10 tries). New connections start with 4 slots and grow by
//! one per successful open up to the learned capacity, then probe one more every 32 opens
//! ([`Session::note_opened`]), so a server with a smaller `MaxSessions` costs a few refusals
//! per executor, not one per command.
//!
//! # Spare channels
//!
//! A command on a pooled connection would pay a round trip for its channel open before its
//! exec request. Each connection therefore keeps up to
//! [`spare_channels`](crate::SshExecutorBuilder::spare_channels) (default 1) session channels
//! opened ahead of demand ([`session::Spares`]): a command takes a ready one, or waits for one
//! being opened (it arrives sooner than a channel of its own), and a replacement is opened in
//! a task of its own (an open is never cancelled halfway: that would leave a channel the
//! server holds). Spares count against the connection's capacity: one is opened only while
//! `commands claiming a channel + spares < capacity`, and since each claim holds a slot and
//! slots never exceed the capacity, commands plus spares never exceed it either (so never
//! the server's `MaxSessions`, with the SFTP and kill channels' room kept). A refused spare
//! open teaches the capacity like any refusal and fails no command; capacity that drops
//! releases the spares beyond it. A spare the server has closed, or whose connection is known to
//! be dead, is dropped and the command opens a channel of its own. Spares
//! close with their connection (idle reaping, `close()`, maximum lifetime, recycling); an
//! idle connection holds its spares (one sshd session slot each, no remote process).
//!
//! Over a 20 ms link a warm `true` takes 2.1–2.2 round trips with a spare and 3.2 without
//! (benchmark `slowlink`). Not 1: OpenSSH opens a session channel with a zero window and
//! opens it only once the exec request has started the session, so the payload line on
//! stdin (see `command::wrapper`) waits one round trip for the window.
//!
//! # Recycling
//!
//! Refused opens cost memory: russh 0.65 answers each one with a reply on the connection's
//! handle that only authentication ever reads, about 0.5 KiB held until the connection
//! closes. Under churn about one open in a hundred is refused, so a connection is retired
//! after 128 refusals and a fresh one dialed when needed ([`PoolStats::connections_recycled`]);
//! the soak test measured 100,000 commands staying within its memory bound this way.

mod extensions;
mod registry;
mod session;
mod slot;
mod startup;
mod stats;

pub(crate) use registry::{
    Counters, Registry, fleet_attempt, in_fleet_attempt, keeping_attempt_policy,
};
pub(crate) use session::{ChannelCount, Running, Session, SpareKind, SparePlan};
pub(crate) use slot::{LogSink, SlotManager, give_back, open_channel, wait_for_close};
pub use stats::PoolStats;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use crate::{
    config::Config,
    error::{Error, Phase, Result},
};

/// How long [`Pool::close`] waits for housekeeping in flight (one exec on a live host).
const HOUSEKEEPING_GRACE: Duration = Duration::from_secs(10);

/// A checked-out slot: returned to the pool when dropped.
pub(crate) type PooledSlot = bb8::PooledConnection<'static, SlotManager>;

/// Everything an executor shares between its clones: the frozen settings, the connections
/// and the pool of channel slots on them.
pub(crate) struct Pool {
    pub(crate) config: Arc<Config>,
    pub(crate) registry: Arc<Registry>,
    slots: bb8::Pool<SlotManager>,
    closed: AtomicBool,
    /// The host's directories of jobs, learned once per account by the jobs layer (they
    /// depend on the login environment's `$XDG_STATE_HOME` and `$HOME`, which SFTP cannot
    /// see), by escalation identity (`None`: the login's own).
    pub(crate) jobs_dirs: Mutex<HashMap<Option<String>, std::path::PathBuf>>,
    /// The host's boot id and boot time, as jobs last read them (their records keep times
    /// since boot).
    pub(crate) host_boot: Mutex<Option<(String, std::time::SystemTime)>>,
    /// When the jobs layer last started pruning the jobs past their retention, by escalation
    /// identity (each account's jobs are its own).
    pub(crate) jobs_pruned_at: Mutex<HashMap<Option<String>, std::time::Instant>>,
    /// The executor's housekeeping task in flight (the jobs layer's prune), which
    /// [`close`](Self::close) and a fleet's job start wait for: a short-lived program (the
    /// CLI) would otherwise exit, and drop it, before it ran.
    housekeeping: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("config", &self.config)
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// A pool with no connections yet. Must run inside a tokio runtime (bb8 spawns its
    /// reaper on it).
    pub(crate) fn new(config: Config) -> Result<Self> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::Config {
                reason: "an SshExecutor must be built inside a tokio runtime".to_owned(),
            });
        }
        let config = Arc::new(config);
        let registry = Arc::new(Registry::new(config.clone()));
        let slots = bb8::Pool::builder()
            .max_size(config.max_connections * config.channels_per_connection)
            .min_idle(None)
            .test_on_check_out(true)
            .idle_timeout(config.idle_timeout)
            // Connection lifetime is enforced per connection by the registry, not per slot.
            .max_lifetime(None)
            .connection_timeout(config.pool_wait_timeout)
            .error_sink(Box::new(LogSink))
            .build_unchecked(SlotManager {
                registry: registry.clone(),
            });
        Ok(Pool {
            config,
            registry,
            slots,
            closed: AtomicBool::new(false),
            jobs_dirs: Mutex::new(HashMap::new()),
            host_boot: Mutex::new(None),
            jobs_pruned_at: Mutex::new(HashMap::new()),
            housekeeping: Mutex::new(None),
        })
    }

    /// Opens a connection now unless one exists.
    pub(crate) async fn warm_up(&self) -> Result<()> {
        self.registry.dial_if_needed(0).await
    }

    /// Checks out a slot, dialing in this task first when the pool must grow (so connection
    /// errors arrive typed), and maps a pool timeout to the last dial error.
    ///
    /// # Cancel safety
    /// bb8 owns the slot in a `PooledConnection` before any further `.await`.
    pub(crate) async fn acquire_slot(&self) -> Result<PooledSlot> {
        let state = self.slots.state();
        self.registry.dial_if_needed(state.idle_connections).await?;
        // Counted while waiting: a dial for more room is made only for callers still waiting.
        let _waiting = self.registry.waiting();
        self.slots.get_owned().await.map_err(|e| match e {
            bb8::RunError::User(e) => e,
            bb8::RunError::TimedOut => Error::PoolTimeout {
                host: self.config.host.clone(),
                port: self.config.port,
                waited: self.config.pool_wait_timeout,
                last_error: self.registry.last_dial_error(),
            },
            // bb8 may add variants; treat them as a pool wait failure.
            #[allow(unreachable_patterns)]
            _ => Error::Timeout {
                host: self.config.host.clone(),
                port: self.config.port,
                phase: Phase::PoolWait,
                after: self.config.pool_wait_timeout,
            },
        })
    }

    /// Whether [`close`](Self::close) was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Stops taking commands and disconnects idle connections; running commands finish.
    /// Housekeeping in flight gets up to [`HOUSEKEEPING_GRACE`] first.
    pub(crate) async fn close(&self) {
        self.finish_housekeeping().await;
        self.closed.store(true, Ordering::Release);
        self.registry.close_all().await;
    }

    /// Keeps `task` as the housekeeping in flight, for
    /// [`finish_housekeeping`](Self::finish_housekeeping). At most one starts per interval,
    /// so one it replaces is long done (dropping its handle would leave it running anyway).
    pub(crate) fn hold_housekeeping(&self, task: tokio::task::JoinHandle<()>) {
        if let Ok(mut housekeeping) = self.housekeeping.lock() {
            *housekeeping = Some(task);
        }
    }

    /// Waits up to [`HOUSEKEEPING_GRACE`] for the housekeeping task in flight, if any, and
    /// aborts it if it takes longer (a host that stopped answering must not hold up a close).
    ///
    /// # Cancel safety
    /// Dropping the future leaves the task running, unwaited for.
    pub(crate) async fn finish_housekeeping(&self) {
        let task = self
            .housekeeping
            .lock()
            .ok()
            .and_then(|mut task| task.take());
        if let Some(mut task) = task
            && tokio::time::timeout(HOUSEKEEPING_GRACE, &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
    }

    /// A snapshot of the pool's state and counters.
    pub(crate) fn stats(&self) -> PoolStats {
        let state = self.slots.state();
        let sessions = self.registry.sessions();
        let counters = &self.registry.counters;
        PoolStats {
            connections: sessions.iter().filter(|s| !s.is_dead()).count(),
            retiring_connections: sessions
                .iter()
                .filter(|s| !s.is_dead() && s.is_retired())
                .count(),
            slots: state.connections,
            idle_slots: state.idle_connections,
            busy_slots: state.connections.saturating_sub(state.idle_connections),
            dials: counters.dials.load(Ordering::Relaxed),
            dial_failures: counters.dial_failures.load(Ordering::Relaxed),
            dial_retries: counters.dial_retries.load(Ordering::Relaxed),
            command_retries: counters.command_retries.load(Ordering::Relaxed),
            connections_closed: counters.sessions_closed.load(Ordering::Relaxed),
            channel_open_retries: counters.channel_open_retries.load(Ordering::Relaxed),
            channel_open_refusals: counters.channel_open_refusals.load(Ordering::Relaxed),
            connections_recycled: counters.sessions_recycled.load(Ordering::Relaxed),
            commands: counters.commands.load(Ordering::Relaxed),
            direct_requests: counters.direct_requests.load(Ordering::Relaxed),
            direct_fallbacks: counters.direct_fallbacks.load(Ordering::Relaxed),
            kills: counters.kills.load(Ordering::Relaxed),
            open_channels: sessions
                .iter()
                .filter(|s| !s.is_dead())
                .map(|s| s.open_channels.load(Ordering::Relaxed))
                .sum(),
            spare_channels: sessions
                .iter()
                .filter(|s| !s.is_dead())
                .map(|s| s.ready_spares())
                .sum(),
            spare_channels_opened: counters.spares_opened.load(Ordering::Relaxed),
            spare_channels_used: counters.spares_used.load(Ordering::Relaxed),
            prestarted_spares_used: counters.prestarted_used.load(Ordering::Relaxed),
            escalated_spares_used: counters.escalated_spares_used.load(Ordering::Relaxed),
            forward_streams: counters.forward_streams_open.load(Ordering::Relaxed),
            forward_streams_opened: counters.forward_streams_opened.load(Ordering::Relaxed),
            forward_stream_failures: counters.forward_stream_failures.load(Ordering::Relaxed),
            forward_connections: self.registry.detached_sessions().len(),
            login_shell_startup: sessions
                .iter()
                .filter(|s| !s.is_dead())
                .filter_map(|s| s.login_shell_startup.get())
                .max(),
            runner: counters
                .runner
                .lock()
                .ok()
                .and_then(|runner| runner.clone()),
            runners_started: counters.runners_started.load(Ordering::Relaxed),
            runners_lost: counters.runners_lost.load(Ordering::Relaxed),
            runner_fallbacks: counters.runner_fallbacks.load(Ordering::Relaxed),
            runner_commands: counters.runner_commands.load(Ordering::Relaxed),
            guarded_commands: counters.guarded_commands.load(Ordering::Relaxed),
            guard_refusals: counters.guard_refusals.load(Ordering::Relaxed),
            waits: state.statistics.get_waited,
            wait_timeouts: state.statistics.get_timed_out,
            wait_time: state.statistics.get_wait_time,
        }
    }
}
