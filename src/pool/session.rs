//! A pooled connection: one authenticated SSH connection plus the bookkeeping the pool keeps
//! on it (slots, running commands, learned capacity, retirement, its SFTP channel).

use std::{
    any::Any,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use russh::client::Handle;

use crate::{
    config::Config,
    error::Result,
    ssh::{ClientHandler, HopCache, HopChain, dial},
};

/// Refused channel opens after which a connection is replaced (about 70 KiB of russh
/// bookkeeping by then; see [`Session::note_refused_open`]).
pub(crate) const REFUSALS_BEFORE_RECYCLE: u32 = 128;

const DIRECT_UNKNOWN: u8 = 0;
const DIRECT_NO: u8 = 1;
const DIRECT_YES: u8 = 2;

/// An authenticated connection shared by up to `capacity` commands at once.
pub(crate) struct Session {
    pub(crate) handle: Handle<ClientHandler>,
    pub(crate) id: u64,
    created: Instant,
    closed: Arc<AtomicBool>,
    retired: AtomicBool,
    /// Channel slots the pool has placed on this connection (busy or idle in the pool).
    pub(crate) slots: AtomicU32,
    /// Commands running on this connection right now (see [`Running`]).
    pub(crate) running: AtomicU32,
    /// How many slots this connection may carry; lowered when the server refuses channels.
    pub(crate) capacity: AtomicU32,
    /// Channel opens the server refused on this connection (see [`Session::note_refused_open`]).
    refused_opens: AtomicU32,
    /// Command and kill channels open on this connection right now (see [`ChannelCount`]).
    pub(crate) open_channels: AtomicU32,
    /// Channel opens that succeeded since the last refusal (see [`Session::note_opened`]).
    opens_since_refusal: AtomicU32,
    /// Which exec request form this connection's login shell takes (see
    /// [`Session::direct_bootstrap`]).
    direct_bootstrap: std::sync::atomic::AtomicU8,
    /// The reusable SFTP channel, opened on first use.
    ///
    /// Type-erased so that the pool does not depend on the file layer, which owns the type
    /// (`files::sftp::SftpChannel`) and downcasts it.
    pub(crate) sftp: tokio::sync::Mutex<Option<Arc<dyn Any + Send + Sync>>>,
    /// The jump-host connections this one runs through, kept alive until it disconnects
    /// (shared with the executor's other connections: the last one out closes them).
    hops: std::sync::Mutex<Option<Arc<HopChain>>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("age", &self.created.elapsed())
            .field("slots", &self.slots.load(Ordering::Relaxed))
            .field("capacity", &self.capacity.load(Ordering::Relaxed))
            .field("dead", &self.is_dead())
            .field("retired", &self.retired.load(Ordering::Relaxed))
            .field("refused_opens", &self.refused_opens.load(Ordering::Relaxed))
            .field("hops", &self.hops())
            .finish()
    }
}

impl Session {
    /// The transport is gone (russh noticed, or the server disconnected).
    pub(crate) fn is_dead(&self) -> bool {
        self.closed.load(Ordering::Acquire)
            || self.handle.is_closed()
            || self.hops().is_some_and(|hops| hops.is_dead())
    }

    fn hops(&self) -> Option<Arc<HopChain>> {
        // A poisoned lock only means a panic elsewhere while swapping an Option.
        self.hops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether commands on this connection may use the exec request's direct form (the
    /// login shell runs the bootstrap itself; `command::direct_wrapper`): `None` until a
    /// command's marker line has told, then fixed, except that a failed direct request turns
    /// it off for good ([`Session::refuse_direct_bootstrap`]).
    pub(crate) fn direct_bootstrap(&self) -> Option<bool> {
        match self.direct_bootstrap.load(Ordering::Acquire) {
            DIRECT_YES => Some(true),
            DIRECT_NO => Some(false),
            _ => None,
        }
    }

    /// Records what the first marker line said (later ones change nothing).
    pub(crate) fn learn_direct_bootstrap(&self, capable: bool) {
        let learned = if capable { DIRECT_YES } else { DIRECT_NO };
        let _ = self.direct_bootstrap.compare_exchange(
            DIRECT_UNKNOWN,
            learned,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// A direct request came back without a marker: the login shell is not what it said.
    pub(crate) fn refuse_direct_bootstrap(&self) {
        self.direct_bootstrap.store(DIRECT_NO, Ordering::Release);
    }

    /// No new slots go here; existing ones finish.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Counts a channel open the server refused, and retires the connection after
    /// [`REFUSALS_BEFORE_RECYCLE`] of them; true when this call retired it.
    ///
    /// Why: for every refusal russh 0.65 queues a reply on its handle that only the
    /// authentication calls ever read (about 0.5 KiB, kept until the connection closes).
    /// Refusals are routine, because sshd frees a session slot a little after the client sees
    /// the channel close (about 1 open in 100 under churn), so a long-lived connection would
    /// grow without bound. Replacing it after a hundred-odd refusals bounds that memory at the
    /// cost of one handshake.
    pub(crate) fn note_refused_open(&self) -> bool {
        let refused = self.refused_opens.fetch_add(1, Ordering::AcqRel) + 1;
        let recycle = refused == REFUSALS_BEFORE_RECYCLE;
        if recycle {
            tracing::debug!(
                id = self.id,
                refused,
                "recycling the connection after refused channel opens"
            );
            self.retire();
        }
        recycle
    }

    /// Lowers the capacity to the number of channels open here when the server refused one:
    /// that is its limit (or it had not freed a just-closed channel yet, which
    /// [`note_opened`](Self::note_opened) later corrects). Returns the new capacity.
    pub(crate) fn learn_from_refusal(&self) -> u32 {
        self.opens_since_refusal.store(0, Ordering::Release);
        let open = self.open_channels.load(Ordering::Acquire).max(1);
        let before = self.capacity.fetch_min(open, Ordering::AcqRel);
        before.min(open)
    }

    /// Whether more slots are placed here than the connection may carry now.
    pub(crate) fn over_capacity(&self) -> bool {
        self.slots.load(Ordering::Acquire) > self.capacity.load(Ordering::Acquire)
    }

    /// Counts a successful open and grows the capacity: by one slot per open while it is below
    /// `learned` (a new connection starts small, see [`SLOW_START`]), and beyond that by one
    /// slot every [`CAPACITY_PROBE_AFTER`] opens without a refusal, up to `max`. So a refusal
    /// that only meant "not freed yet" costs a little capacity for a while, not for good.
    /// Returns the new capacity when it grew.
    pub(crate) fn note_opened(&self, learned: u32, max: u32) -> Option<u32> {
        let opened = self.opens_since_refusal.fetch_add(1, Ordering::AcqRel) + 1;
        let capacity = self.capacity.load(Ordering::Acquire);
        let grow = if capacity < learned {
            true
        } else {
            capacity < max && opened.is_multiple_of(CAPACITY_PROBE_AFTER)
        };
        if !grow {
            return None;
        }
        self.capacity
            .compare_exchange(capacity, capacity + 1, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|c| c + 1)
    }

    /// Whether this session may take new commands, retiring it first if it is too old.
    pub(crate) fn accepts_work(&self, max_lifetime: Option<Duration>) -> bool {
        if max_lifetime.is_some_and(|max| self.created.elapsed() >= max) {
            self.retire();
        }
        !self.is_dead() && !self.is_retired()
    }

    /// Closes the connection politely; errors are irrelevant at that point.
    pub(crate) async fn disconnect(&self) {
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            self.handle
                .disconnect(russh::Disconnect::ByApplication, "", "en"),
        )
        .await;
        // The registry may keep this session around for a while (after `close`, say): let
        // go of the hop chain now, so its connections close once no session needs them.
        self.hops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }
}

impl Session {
    /// Dials a new connection (see [`dial`]) and wraps it for the pool.
    pub(crate) async fn dial(config: &Config, hop_cache: &HopCache, id: u64) -> Result<Session> {
        let connection = dial(config, hop_cache, id).await?;
        Ok(Session {
            handle: connection.handle,
            id,
            created: Instant::now(),
            closed: connection.closed,
            retired: AtomicBool::new(false),
            slots: AtomicU32::new(0),
            running: AtomicU32::new(0),
            capacity: AtomicU32::new(config.channels_per_connection),
            refused_opens: AtomicU32::new(0),
            open_channels: AtomicU32::new(0),
            opens_since_refusal: AtomicU32::new(0),
            direct_bootstrap: std::sync::atomic::AtomicU8::new(DIRECT_UNKNOWN),
            sftp: tokio::sync::Mutex::new(None),
            hops: std::sync::Mutex::new(connection.hops),
        })
    }
}

/// Successful opens without a refusal after which a connection's capacity grows by one slot
/// beyond what the pool has learned (see [`Session::note_opened`]).
pub(crate) const CAPACITY_PROBE_AFTER: u32 = 32;

/// Channels a new connection starts with; it grows by one per successful open up to what the
/// pool has learned. A server with a small `MaxSessions` then refuses a couple of opens, not a
/// burst of eight; 4 rather than 2 because with 2 a cold burst dials extra connections (the
/// benchmark's 64 cold callers with `max_connections(8)`: 0.36 s with 4 or without slow start,
/// 0.42–0.47 s with 2).
pub(crate) const SLOW_START: u32 = 4;

/// Counts one open command (or kill) channel on a session while it lives: what
/// [`Session::learn_from_refusal`] compares the server's limit with.
#[derive(Debug)]
pub(crate) struct ChannelCount(Arc<Session>);

impl ChannelCount {
    pub(crate) fn new(session: Arc<Session>) -> Self {
        session.open_channels.fetch_add(1, Ordering::AcqRel);
        ChannelCount(session)
    }
}

impl Drop for ChannelCount {
    fn drop(&mut self) {
        self.0.open_channels.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Marks a command (from the moment it holds a slot, channel open included) or a file
/// operation as running on a session for as long as it lives. When the last one of a retired
/// session ends (the executor was closed, the connection reached its maximum lifetime or is
/// being recycled), the connection is closed right away instead of waiting for the pool to
/// reap its idle slots.
#[derive(Debug)]
pub(crate) struct Running(Arc<Session>);

impl Running {
    pub(crate) fn new(session: Arc<Session>) -> Self {
        session.running.fetch_add(1, Ordering::AcqRel);
        Running(session)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let left = self
            .0
            .running
            .fetch_sub(1, Ordering::AcqRel)
            .saturating_sub(1);
        if left == 0 && self.0.is_retired() {
            let session = self.0.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { session.disconnect().await });
            }
        }
    }
}
