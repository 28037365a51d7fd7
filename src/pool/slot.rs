//! A [`Slot`]: the right to run one command (one session channel) on one connection, and
//! bb8's manager of slots.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use crate::{
    config::Config,
    error::{Error, Phase, Result},
    pool::{
        registry::{Counters, Registry},
        session::{ChannelCount, Session, Spare, SpareKind, SparePlan, Take},
    },
};

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
    pub(crate) fn new(session: Arc<Session>, registry: Arc<Registry>) -> Self {
        Slot {
            session,
            registry,
            broken: false,
        }
    }

    /// Makes the pool discard this slot instead of reusing it.
    pub(crate) fn mark_broken(&mut self) {
        self.broken = true;
    }

    fn unusable(&self) -> bool {
        self.broken
            || self.session.is_dead()
            || self.session.is_retired()
            || self.session.over_capacity()
    }

    /// Opens a session channel. When the server refuses one, the connection's capacity drops
    /// to the channels open on it (and new connections start there); if this slot is then
    /// beyond it, the slot is given up at once so that the command waits in the pool for a
    /// free one instead of knocking again, otherwise (the server had not freed a closed
    /// channel yet) the open is retried with backoff.
    /// Returns the channel, its count, and what it already runs ([`SpareKind`]: a shell
    /// pre-started as the login or through `wanted`'s escalation waits for a payload on
    /// stdin). `wanted` is how the command escalates, if it pre-escalates at all: a spare
    /// pre-escalated otherwise is no good for it, and the spares made from now on follow it.
    /// With `fresh` no spare is taken (a terminal's channel gets its `pty-req` first).
    pub(crate) async fn open_channel(
        &mut self,
        wanted: Option<&SparePlan>,
        fresh: bool,
    ) -> Result<(russh::Channel<russh::client::Msg>, ChannelCount, SpareKind)> {
        let registry = self.registry.clone();
        let config = &registry.config;
        self.session.want_spares(wanted);
        if self.session.over_capacity() {
            // The capacity dropped after this slot was placed: knocking would only be
            // refused. Give the slot up; the command waits in the pool for another.
            self.mark_broken();
            return Err(Error::ChannelRefused {
                host: config.host.clone(),
                port: config.port,
                attempts: 0,
            });
        }
        let claim = self.session.claim();
        // A spare first: no round trip. One that turns out unusable is dropped and the next
        // source tried; in the end the command opens a channel of its own.
        if !fresh {
            loop {
                let spare = match self.session.take_spare() {
                    Take::Ready(channel, count) => Some((channel, count)),
                    Take::Wait(handed) => match handed.await {
                        Ok(channel) => Some((channel, ChannelCount::adopt(self.session.clone()))),
                        // That spare could not be opened.
                        Err(_) => None,
                    },
                    Take::Open => None,
                };
                let Some((mut spare, mut count)) = spare else {
                    break;
                };
                // A spare pre-started before the connection found out that its login shell does
                // not run the direct form (see `Session::refuse_direct_bootstrap`) is no good,
                // nor one pre-escalated for another escalation than the command's.
                let state = if (spare.kind.prestarted()
                    && self.session.direct_bootstrap() != Some(true))
                    || !spare.kind.serves(wanted)
                {
                    SpareState::Unwanted
                } else {
                    spare_state(&self.session, &mut spare.channel)
                };
                let escalated = matches!(spare.kind, SpareKind::Escalated(_));
                match state {
                    SpareState::Usable => {}
                    // A pre-escalated shell that ended before its command: the tool refused.
                    SpareState::Gone if escalated => {
                        self.session.refuse_escalated_spares();
                        continue;
                    }
                    // Closed by the server, or its connection is gone: nothing to hand back.
                    SpareState::Gone => continue,
                    SpareState::Talked if escalated => {
                        // The tool printed before any command (a warning on every run).
                        self.session.refuse_escalated_spares();
                        discard_spare(spare, count, config.connect_timeout);
                        continue;
                    }
                    SpareState::Talked if spare.kind.prestarted() => {
                        // Its login shell printed before any command: rc files that talk.
                        self.session.note_noisy_login();
                        discard_spare(spare, count, config.connect_timeout);
                        continue;
                    }
                    SpareState::Talked | SpareState::Unwanted => {
                        discard_spare(spare, count, config.connect_timeout);
                        continue;
                    }
                }
                {
                    count.take_claim(claim);
                    registry
                        .counters
                        .spares_used
                        .fetch_add(1, Ordering::Relaxed);
                    if spare.kind.prestarted() {
                        registry
                            .counters
                            .prestarted_used
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    if escalated {
                        registry
                            .counters
                            .escalated_spares_used
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    replenish(&self.session, &registry);
                    return Ok((spare.channel, count, spare.kind));
                }
            }
        }
        let session = self.session.clone();
        let mut keep_trying = || {
            let capacity = session.learn_from_refusal();
            registry.learn_capacity(capacity);
            release_spares_over_capacity(&session, registry.config.connect_timeout);
            !session.over_capacity()
        };
        let result =
            open_channel(&self.session, config, &registry.counters, &mut keep_trying).await;
        match result {
            Ok((channel, mut count)) => {
                count.take_claim(claim);
                note_opened(&self.session, &registry);
                replenish(&self.session, &registry);
                Ok((channel, count, SpareKind::Plain))
            }
            Err(error) => {
                self.mark_broken();
                Err(error)
            }
        }
    }
}

/// Counts a successful open on `session`: its capacity grows (slow start and probing, see
/// [`Session::note_opened`]), and waiting placements may find room.
fn note_opened(session: &Session, registry: &Registry) {
    let learned = registry.learned_capacity.load(Ordering::Acquire);
    if let Some(grown) = session.note_opened(learned, registry.config.channels_per_connection) {
        registry.learned_capacity.fetch_max(grown, Ordering::AcqRel);
        registry.room.notify_waiters();
    }
}

/// Opens a spare channel on `session` in the background if it keeps fewer than
/// `spare_channels` and has room for one (see [`Spares`](super::session::Spares)).
///
/// The open runs in a task of its own so that it always completes: a half-done open would
/// leave a channel the server holds open and nobody closes.
pub(crate) fn replenish(session: &Arc<Session>, registry: &Arc<Registry>) {
    if !session.reserve_spare(registry.config.spare_channels) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        session.spare_opened(None);
        return;
    };
    let (session, registry) = (session.clone(), registry.clone());
    runtime.spawn(async move {
        let learner = session.clone();
        let config = registry.config.clone();
        let counters_registry = registry.clone();
        // One attempt: a refusal teaches the capacity like any other, but a spare is not
        // worth knocking again for (a command that needs a channel will).
        let mut keep_trying = || {
            let capacity = learner.learn_from_refusal();
            counters_registry.learn_capacity(capacity);
            release_spares_over_capacity(&learner, counters_registry.config.connect_timeout);
            false
        };
        let opened = open_channel(&session, &config, &registry.counters, &mut keep_trying).await;
        match opened {
            Ok((channel, count)) => {
                registry
                    .counters
                    .spares_opened
                    .fetch_add(1, Ordering::Relaxed);
                note_opened(&session, &registry);
                let spare = prestart(&session, &config, channel).await;
                session.spare_opened(spare.map(|spare| (spare, count)));
            }
            Err(error) => {
                tracing::debug!(%error, "spare channel not opened");
                session.spare_opened(None);
            }
        }
    });
}

/// Starts the login shell of a new spare ahead of demand, when its connection takes the
/// direct form (see `command::prestart_request`), or the shell of the escalation the last
/// command wanted ([`Session::want_spares`]), and waits for the server to accept; a spare
/// whose start the server refused is given up (`None`).
async fn prestart(
    session: &Session,
    config: &crate::config::Config,
    mut channel: russh::Channel<russh::client::Msg>,
) -> Option<Spare> {
    if config.prestart_request.is_empty() || !session.may_prestart() {
        return Some(Spare {
            channel,
            kind: SpareKind::Plain,
        });
    }
    let (request, kind) = match session.spare_plan() {
        Some(plan) => (plan.request.to_vec(), SpareKind::Escalated(plan.identity)),
        None => (config.prestart_request.clone(), SpareKind::Login),
    };
    let started = tokio::time::timeout(config.connect_timeout, async {
        channel.exec(true, request).await.ok()?;
        loop {
            match channel.wait().await? {
                russh::ChannelMsg::Success => return Some(()),
                russh::ChannelMsg::WindowAdjusted { .. } => {}
                _ => return None,
            }
        }
    })
    .await;
    if matches!(started, Ok(Some(()))) {
        Some(Spare { channel, kind })
    } else {
        // Closing stdin ends a shell that did start (nothing ran); then the channel closes.
        end_prestarted(channel, config.connect_timeout).await;
        None
    }
}

/// Hands back a channel that will carry no command: a pre-started one gets EOF (see
/// [`end_prestarted`]), another runs `exit 0` ([`release_unused`]).
pub(crate) async fn give_back(
    channel: russh::Channel<russh::client::Msg>,
    prestarted: bool,
    limit: Duration,
) {
    if prestarted {
        end_prestarted(channel, limit).await;
    } else {
        release_unused(channel, limit).await;
    }
}

/// Ends a pre-started spare that will carry no command: EOF on stdin makes its shell exit
/// before running anything; then the server closes the channel.
async fn end_prestarted(mut channel: russh::Channel<russh::client::Msg>, limit: Duration) {
    let closed = tokio::time::timeout(limit, async {
        let _ = channel.eof().await;
        wait_for_close(&mut channel).await;
    })
    .await;
    if closed.is_err() {
        let _ = channel.close().await;
    }
}

/// Reads `channel` until the server closes it (or the connection ends), so that it is
/// released properly; what arrives meanwhile is dropped.
pub(crate) async fn wait_for_close(channel: &mut russh::Channel<russh::client::Msg>) {
    while let Some(message) = channel.wait().await {
        if matches!(message, russh::ChannelMsg::Close) {
            return;
        }
    }
}

/// What a spare is good for.
enum SpareState {
    /// Its connection lives and the server has said nothing on it.
    Usable,
    /// The server closed it, or its connection is gone.
    Gone,
    /// The server said something unexpected on it: not trusted with a command.
    Unwanted,
    /// Output arrived on it before any command (a pre-started login shell's rc files).
    Talked,
}

fn spare_state(session: &Session, channel: &mut russh::Channel<russh::client::Msg>) -> SpareState {
    if session.is_dead() {
        return SpareState::Gone;
    }
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        // `wait` is a queue receive: cancel-safe, so polling it once loses nothing.
        let next = std::pin::pin!(channel.wait());
        match next.poll(&mut context) {
            std::task::Poll::Pending => return SpareState::Usable,
            std::task::Poll::Ready(Some(russh::ChannelMsg::WindowAdjusted { .. })) => {}
            std::task::Poll::Ready(None | Some(russh::ChannelMsg::Close)) => {
                return SpareState::Gone;
            }
            std::task::Poll::Ready(Some(
                russh::ChannelMsg::Data { .. } | russh::ChannelMsg::ExtendedData { .. },
            )) => return SpareState::Talked,
            std::task::Poll::Ready(Some(other)) => {
                tracing::debug!(message = ?message_kind(&other), "spare channel not used");
                return SpareState::Unwanted;
            }
        }
    }
}

/// The kind of a channel message, for logs (never its data).
fn message_kind(message: &russh::ChannelMsg) -> &'static str {
    match message {
        russh::ChannelMsg::Eof => "eof",
        russh::ChannelMsg::ExitStatus { .. } => "exit-status",
        russh::ChannelMsg::ExitSignal { .. } => "exit-signal",
        russh::ChannelMsg::Success => "success",
        russh::ChannelMsg::Failure => "failure",
        _ => "other",
    }
}

/// Gives up a spare that cannot or need not carry a command, without leaving it half-open.
fn discard_spare(spare: Spare, count: ChannelCount, limit: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        give_back(spare.channel, spare.kind.prestarted(), limit).await;
        drop(count);
    });
}

/// Releases the spares beyond `session`'s capacity after it dropped.
fn release_spares_over_capacity(session: &Arc<Session>, limit: Duration) {
    for (channel, count) in session.spares_over_capacity() {
        discard_spare(channel, count, limit);
    }
}

/// Hands an unused channel back to the server.
///
/// A client-side `close()` leaks ~3.3 KiB in russh for good (the server's CLOSE reply is
/// ignored), so the channel runs `exit 0` instead and the server closes it; `close()` is only
/// the fallback when the server does not answer in time. A channel the server has closed
/// already (or whose connection is gone) just ends.
async fn release_unused(mut channel: russh::Channel<russh::client::Msg>, limit: Duration) {
    let closed_by_server = tokio::time::timeout(limit, async {
        channel.exec(false, "exit 0").await.ok()?;
        let _ = channel.eof().await;
        wait_for_close(&mut channel).await;
        Some(())
    })
    .await;
    if !matches!(closed_by_server, Ok(Some(()))) {
        let _ = channel.close().await;
    }
}

/// Opens a session channel on `session`, retrying `ChannelOpenFailure` with backoff (1 ms
/// doubling to 50 ms, 10 tries) while `keep_trying`, asked after each refusal, says so.
/// The returned count keeps the channel in [`Session::open_channels`] while it lives.
pub(crate) async fn open_channel(
    session: &Arc<Session>,
    config: &Config,
    counters: &Counters,
    keep_trying: &mut (dyn FnMut() -> bool + Send),
) -> Result<(russh::Channel<russh::client::Msg>, ChannelCount)> {
    const ATTEMPTS: u32 = 10;
    let mut delay = Duration::from_millis(1);
    let mut attempts = 0;
    while attempts < ATTEMPTS {
        attempts += 1;
        let Some(handle) = session.handle() else {
            return Err(Error::ConnectionLost {
                host: config.host.clone(),
                port: config.port,
            });
        };
        match tokio::time::timeout(config.connect_timeout, handle.channel_open_session()).await {
            Ok(Ok(channel)) => return Ok((channel, ChannelCount::new(session.clone()))),
            Ok(Err(russh::Error::ChannelOpenFailure(_))) => {
                note_refused_open(session, counters);
                if attempts == ATTEMPTS || !keep_trying() {
                    break;
                }
                counters
                    .channel_open_retries
                    .fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(50));
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
        attempts,
    })
}

fn note_refused_open(session: &Session, counters: &Counters) {
    counters
        .channel_open_refusals
        .fetch_add(1, Ordering::Relaxed);
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
        // A placement may fit now.
        self.registry.room.notify_waiters();
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
