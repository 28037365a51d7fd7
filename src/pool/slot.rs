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
        session::{ChannelCount, Session},
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
    pub(crate) async fn open_channel(
        &mut self,
    ) -> Result<(russh::Channel<russh::client::Msg>, ChannelCount)> {
        let registry = self.registry.clone();
        let config = &registry.config;
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
        let session = self.session.clone();
        let mut keep_trying = || {
            let capacity = session.learn_from_refusal();
            registry.learn_capacity(capacity);
            !session.over_capacity()
        };
        let result =
            open_channel(&self.session, config, &registry.counters, &mut keep_trying).await;
        match &result {
            Ok(_) => {
                let learned = registry.learned_capacity.load(Ordering::Acquire);
                if let Some(grown) = self
                    .session
                    .note_opened(learned, config.channels_per_connection)
                {
                    registry.learned_capacity.fetch_max(grown, Ordering::AcqRel);
                }
            }
            Err(_) => self.mark_broken(),
        }
        result
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
        match tokio::time::timeout(
            config.connect_timeout,
            session.handle.channel_open_session(),
        )
        .await
        {
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
