//! A pooled connection: one authenticated SSH connection plus the bookkeeping the pool keeps
//! on it (slots, running commands, learned capacity, retirement, and what higher layers keep
//! there: [`Extensions`]).

use std::{
    collections::VecDeque,
    sync::{
        Arc, MutexGuard,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use russh::client::{Handle, Msg};
use tokio::sync::oneshot;

use crate::{
    config::Config,
    error::Result,
    pool::{extensions::Extensions, startup::LoginShellStartup},
    ssh::{ClientHandler, HopCache, HopChain, SharedRoutes, dial},
};

/// Refused channel opens after which a connection is replaced (about 70 KiB of russh
/// bookkeeping by then; see [`Session::note_refused_open`]).
pub(crate) const REFUSALS_BEFORE_RECYCLE: u32 = 128;

const DIRECT_UNKNOWN: u8 = 0;
const DIRECT_NO: u8 = 1;
const DIRECT_YES: u8 = 2;

/// An authenticated connection shared by up to `capacity` commands at once.
pub(crate) struct Session {
    /// The connection, until [`disconnect`](Self::disconnect) lets it go: an idle slot in
    /// the pool may keep this `Session` for a while, and the russh handle holds the
    /// connection's message queues (about 35 KiB), which a fleet of 10,000 released hosts
    /// kept until the end of the run.
    handle: std::sync::Mutex<Option<Arc<Handle<ClientHandler>>>>,
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
    /// The login shell said something before a request ran (a login rc file that prints):
    /// spares on this connection are no longer pre-started (see `slot::prestart`).
    noisy_login: AtomicBool,
    /// What new spares pre-start: the escalation the last command wanted (see
    /// [`EscalatedSpares`]), or the login shell.
    escalated_spares: std::sync::Mutex<EscalatedSpares>,
    /// Session channels opened ahead of demand, and the commands claiming channels here
    /// (see [`Spares`]).
    spares: std::sync::Mutex<Spares>,
    /// How long the login shell takes to start here (see [`LoginShellStartup`]).
    pub(crate) login_shell_startup: LoginShellStartup,
    /// What higher layers keep on this connection, one value per type: the SFTP channels
    /// (`files::sftp::SftpSlots`), the resident runner (`command::resident::RunnerSlot`).
    pub(crate) extensions: Extensions,
    /// The jump-host connections this one runs through, kept alive until it disconnects
    /// (shared with the executor's other connections: the last one out closes them).
    hops: std::sync::Mutex<Option<Arc<HopChain>>>,
    /// The remote forwards requested on this connection (`forwards::remote`).
    pub(crate) forwarded: SharedRoutes,
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
            || self.handle().is_none_or(|handle| handle.is_closed())
            || self.hops().is_some_and(|hops| hops.is_dead())
    }

    /// The connection's russh handle; `None` once disconnected.
    pub(crate) fn handle(&self) -> Option<Arc<Handle<ClientHandler>>> {
        // A poisoned lock only means a panic elsewhere while swapping an Option.
        self.handle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
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

    /// Whether new spares here may be pre-started: the connection takes the direct form and
    /// its login shell has not printed anything while waiting.
    pub(crate) fn may_prestart(&self) -> bool {
        self.direct_bootstrap() == Some(true) && !self.noisy_login.load(Ordering::Acquire)
    }

    /// Records the escalation the command taking a channel now wanted (`None`: it wanted
    /// none), so that the spares pre-started from now on match it: a steady workload of
    /// escalated commands finds the tool already run (see [`EscalatedSpares`]).
    pub(crate) fn want_spares(&self, plan: Option<&SparePlan>) {
        let mut spares = self
            .escalated_spares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !spares.refused {
            spares.plan = plan.cloned();
        }
    }

    /// The escalation new spares pre-start, if any.
    pub(crate) fn spare_plan(&self) -> Option<SparePlan> {
        self.escalated_spares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .plan
            .clone()
    }

    /// A pre-escalated spare ended or spoke before its command (the tool refused, or warns
    /// on every run): this connection pre-escalates no more.
    pub(crate) fn refuse_escalated_spares(&self) {
        let mut spares = self
            .escalated_spares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        spares.refused = true;
        spares.plan = None;
    }

    /// The login shell printed something before running a request (a command's output
    /// before its marker, or a pre-started spare's before its command): its rc files talk,
    /// and every pre-started spare would be thrown away.
    pub(crate) fn note_noisy_login(&self) {
        self.noisy_login.store(true, Ordering::Release);
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
        let handle = self
            .handle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            let _ = tokio::time::timeout(
                Duration::from_secs(2),
                handle.disconnect(russh::Disconnect::ByApplication, "", "en"),
            )
            .await;
        }
        // What higher layers kept here (the SFTP channels' queues, the runner) goes with the
        // connection too: one being opened right now fails with the connection and is not
        // kept.
        self.extensions.clear();
        // The channels went with the connection: forget the spares (their count included).
        let spares = std::mem::take(&mut self.lock_spares().ready);
        self.open_channels
            .fetch_sub(count_u32(spares.len()), Ordering::AcqRel);
        drop(spares);
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
            handle: std::sync::Mutex::new(Some(Arc::new(connection.handle))),
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
            noisy_login: AtomicBool::new(false),
            escalated_spares: std::sync::Mutex::new(EscalatedSpares::default()),
            spares: std::sync::Mutex::new(Spares::default()),
            login_shell_startup: LoginShellStartup::default(),
            extensions: Extensions::default(),
            hops: std::sync::Mutex::new(connection.hops),
            forwarded: connection.forwarded,
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
/// [`Session::learn_from_refusal`] compares the server's limit with. A command's count also
/// holds its claim (see [`Spares`]), released with it.
#[derive(Debug)]
pub(crate) struct ChannelCount {
    session: Arc<Session>,
    counted: bool,
    claim: bool,
}

impl ChannelCount {
    pub(crate) fn new(session: Arc<Session>) -> Self {
        session.open_channels.fetch_add(1, Ordering::AcqRel);
        ChannelCount {
            session,
            counted: true,
            claim: false,
        }
    }

    /// Takes over the count of a spare channel (counted while it waited, see
    /// [`ChannelCount::detach`]).
    pub(crate) fn adopt(session: Arc<Session>) -> Self {
        ChannelCount {
            session,
            counted: true,
            claim: false,
        }
    }

    /// Leaves the channel counted without holding the session: a spare's count is kept by
    /// the session itself, which must not hold an `Arc` to itself.
    fn detach(mut self) {
        self.counted = false;
    }

    /// This channel is a command's: its end also ends the command's claim.
    pub(crate) fn take_claim(&mut self, claim: Claim) {
        claim.transfer();
        self.claim = true;
    }
}

impl Drop for ChannelCount {
    fn drop(&mut self) {
        if self.counted {
            self.session.open_channels.fetch_sub(1, Ordering::AcqRel);
        }
        if self.claim {
            self.session.end_claim();
        }
    }
}

fn count_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The channels a connection keeps open ahead of demand ([spare channels]), and the
/// commands that claim a channel on it right now.
///
/// A command that holds a slot *claims* a channel (from the moment it asks for one until its
/// channel is gone). Spares are opened only while `claims + ready + unassigned < capacity`
/// (an opening spare is *assigned* once a command waits for it): every claim holds a slot of
/// its own and slots never exceed the capacity, so a command that finds no spare and opens
/// its own channel still fits, and command channels plus spares never exceed the connection's
/// capacity (the server's `MaxSessions` minus the SFTP and kill channels). A command takes a
/// ready spare, or waits for one being opened (it arrives sooner than a channel of its own
/// would), or opens its own.
///
/// [spare channels]: crate::SshExecutorBuilder::spare_channels
/// A spare channel: opened and unused, and maybe already running the pre-started bootstrap
/// (see [`SpareKind`]).
pub(crate) struct Spare {
    pub(crate) channel: russh::Channel<Msg>,
    pub(crate) kind: SpareKind,
}

/// What a channel a command gets already runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SpareKind {
    /// Nothing: the command sends its exec request.
    Plain,
    /// The login shell, pre-started, waits for a command on stdin
    /// (`command::prestart_request`).
    Login,
    /// A shell started through an escalation tool (`sudo -n`, `doas -n`), pre-started,
    /// waits for a command on stdin (`command::escalated_prestart_request`); the identity of
    /// the escalation (`Become::identity`).
    Escalated(Arc<str>),
}

impl SpareKind {
    /// Whether a shell already waits for the command's payload.
    pub(crate) fn prestarted(&self) -> bool {
        !matches!(self, SpareKind::Plain)
    }

    /// Whether a command that escalates with `plan` (or not at all) may run on it: a
    /// pre-escalated shell only for the same escalation; the login shell and a plain channel
    /// for any command (an escalated one sends its whole request to the login shell).
    pub(crate) fn serves(&self, plan: Option<&SparePlan>) -> bool {
        match self {
            SpareKind::Escalated(identity) => plan.is_some_and(|plan| plan.identity == *identity),
            SpareKind::Plain | SpareKind::Login => true,
        }
    }
}

/// How to pre-start spares for an escalation that reads no password (`sudo -n`, `doas -n`):
/// the tool then runs when the spare is made, not on a command's critical path. Made by the
/// command layer; the pool only runs the request.
#[derive(Debug, Clone)]
pub(crate) struct SparePlan {
    /// The escalation's identity (`Become::identity`).
    pub(crate) identity: Arc<str>,
    /// The exec request that starts the escalated shell.
    pub(crate) request: Arc<[u8]>,
}

/// The escalation a connection's new spares pre-start (see [`Session::want_spares`]).
#[derive(Debug, Default)]
struct EscalatedSpares {
    plan: Option<SparePlan>,
    /// A pre-escalated spare failed here: none any more.
    refused: bool,
}

#[derive(Default)]
pub(crate) struct Spares {
    /// Opened, unused channels; each counted in [`Session::open_channels`].
    ready: Vec<Spare>,
    /// Spares being opened.
    opening: u32,
    /// Commands waiting for a spare being opened (never more than `opening`).
    waiters: VecDeque<oneshot::Sender<Spare>>,
    /// Commands that claim a channel here (see above).
    claims: u32,
}

impl std::fmt::Debug for Spares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spares")
            .field("ready", &self.ready.len())
            .field("opening", &self.opening)
            .field("waiters", &self.waiters.len())
            .field("claims", &self.claims)
            .finish()
    }
}

/// A command's claim on a channel of a session (see [`Spares`]): ends when dropped, or
/// when its channel's [`ChannelCount`] ends.
#[derive(Debug)]
pub(crate) struct Claim(Option<Arc<Session>>);

impl Claim {
    fn transfer(mut self) {
        self.0 = None;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(session) = self.0.take() {
            session.end_claim();
        }
    }
}

/// Where a command's channel comes from.
pub(crate) enum Take {
    /// A ready spare, with its count.
    Ready(Spare, ChannelCount),
    /// A spare being opened will be handed over here (or the sender dropped if it failed).
    Wait(oneshot::Receiver<Spare>),
    /// No spare: open a channel.
    Open,
}

impl Session {
    fn lock_spares(&self) -> MutexGuard<'_, Spares> {
        // A poisoned lock only means a panic elsewhere while updating plain counters.
        self.spares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn end_claim(&self) {
        let mut spares = self.lock_spares();
        spares.claims = spares.claims.saturating_sub(1);
    }

    /// Spares ready on this connection now.
    pub(crate) fn ready_spares(&self) -> usize {
        self.lock_spares().ready.len()
    }

    /// Starts a command's claim on a channel here (see [`Spares`]).
    pub(crate) fn claim(self: &Arc<Self>) -> Claim {
        self.lock_spares().claims += 1;
        Claim(Some(self.clone()))
    }

    /// Where the next channel of a command (holding a claim) comes from.
    pub(crate) fn take_spare(self: &Arc<Self>) -> Take {
        let mut spares = self.lock_spares();
        if let Some(channel) = spares.ready.pop() {
            return Take::Ready(channel, ChannelCount::adopt(self.clone()));
        }
        if spares.opening > count_u32(spares.waiters.len()) {
            let (tx, rx) = oneshot::channel();
            spares.waiters.push_back(tx);
            return Take::Wait(rx);
        }
        Take::Open
    }

    /// Whether one more spare may be opened, `wanted` being how many to keep; if so it
    /// counts as opening until [`spare_opened`](Self::spare_opened).
    pub(crate) fn reserve_spare(&self, wanted: u32) -> bool {
        if self.is_dead() || self.is_retired() {
            return false;
        }
        let capacity = self.capacity.load(Ordering::Acquire);
        let mut spares = self.lock_spares();
        let ready = count_u32(spares.ready.len());
        let unassigned = spares
            .opening
            .saturating_sub(count_u32(spares.waiters.len()));
        if ready + spares.opening >= wanted || spares.claims + ready + unassigned >= capacity {
            return false;
        }
        spares.opening += 1;
        true
    }

    /// A spare reserved with [`reserve_spare`](Self::reserve_spare) was opened (`Some`) or
    /// not: hands it to a waiting command, or keeps it ready.
    pub(crate) fn spare_opened(self: &Arc<Self>, opened: Option<(Spare, ChannelCount)>) {
        let mut spares = self.lock_spares();
        spares.opening = spares.opening.saturating_sub(1);
        let Some((mut channel, count)) = opened else {
            // Waiters beyond the spares still opening open channels of their own.
            while count_u32(spares.waiters.len()) > spares.opening {
                spares.waiters.pop_back();
            }
            return;
        };
        if self.is_dead() {
            // The connection is gone, and the channel with it. Commands waiting for a spare
            // must not wait for one that will never come: dropping their senders sends them
            // on to a channel of their own (which fails, and the command starts elsewhere).
            spares.waiters.clear();
            return;
        }
        count.detach();
        while let Some(waiter) = spares.waiters.pop_front() {
            match waiter.send(channel) {
                Ok(()) => return,
                // That command is gone: the next one, or keep it.
                Err(back) => channel = back,
            }
        }
        spares.ready.push(channel);
    }

    /// Takes the ready spares beyond what the capacity allows now (it dropped: the server
    /// refused a channel), with their counts, for the caller to release.
    pub(crate) fn spares_over_capacity(self: &Arc<Self>) -> Vec<(Spare, ChannelCount)> {
        let capacity = self.capacity.load(Ordering::Acquire);
        let mut spares = self.lock_spares();
        let mut taken = Vec::new();
        while spares.claims + count_u32(spares.ready.len()) > capacity {
            match spares.ready.pop() {
                Some(channel) => taken.push((channel, ChannelCount::adopt(self.clone()))),
                None => break,
            }
        }
        taken
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
