//! One authenticated SSH connection and the bookkeeping the pool keeps on it.

use std::{
    borrow::Cow,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use russh::client::Handle;

use crate::{
    auth::{self, Target},
    builder::Config,
    error::{Error, Phase, Result},
    host_key::{ClientHandler, HandlerError},
};

/// An authenticated connection shared by up to `capacity` commands at once.
pub(crate) struct Session {
    pub(crate) handle: Handle<ClientHandler>,
    pub(crate) id: u64,
    created: Instant,
    closed: Arc<AtomicBool>,
    retired: AtomicBool,
    /// Channel slots the pool has placed on this connection.
    pub(crate) slots: AtomicU32,
    /// How many slots this connection may carry; lowered when the server refuses channels.
    pub(crate) capacity: AtomicU32,
    /// The reusable SFTP channel, opened on first use.
    pub(crate) sftp: tokio::sync::Mutex<Option<Arc<russh_sftp::client::SftpSession>>>,
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
            .finish()
    }
}

impl Session {
    /// The transport is gone (russh noticed, or the server disconnected).
    pub(crate) fn is_dead(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.handle.is_closed()
    }

    /// No new slots go here; existing ones finish.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
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
    }
}

fn russh_config(config: &Config) -> russh::client::Config {
    use russh::cipher;
    russh::client::Config {
        // Nagle plus delayed ACKs made the first channel on a new connection stall ~40 ms.
        nodelay: true,
        keepalive_interval: config.keepalive_interval,
        keepalive_max: config.keepalive_max,
        // With keepalives on, an inactivity timeout would only close idle pooled connections.
        inactivity_timeout: None,
        // AES-GCM first: ~1.7x the throughput of chacha20-poly1305 on CPUs with AES-NI.
        preferred: russh::Preferred {
            cipher: Cow::Borrowed(&[
                cipher::AES_256_GCM,
                cipher::AES_128_GCM,
                cipher::CHACHA20_POLY1305,
                cipher::AES_256_CTR,
                cipher::AES_192_CTR,
                cipher::AES_128_CTR,
            ]),
            ..Default::default()
        },
        window_size: 8 * 1024 * 1024,
        ..Default::default()
    }
}

/// Opens, verifies and authenticates a new connection, and pays the first-channel stall with
/// a warm-up ping. Everything runs under `connect_timeout`.
pub(crate) async fn dial(config: &Config, id: u64) -> Result<Session> {
    let deadline = config.connect_timeout;
    let host = config.host.clone();
    let port = config.port;
    let timeout_error = |phase| Error::Timeout {
        host: host.clone(),
        port,
        phase,
        after: deadline,
    };
    let started = Instant::now();
    let remaining = || deadline.saturating_sub(started.elapsed());

    let stream = tokio::time::timeout(
        remaining(),
        tokio::net::TcpStream::connect((config.host.as_str(), config.port)),
    )
    .await
    .map_err(|_| timeout_error(Phase::Connect))?
    .map_err(|source| Error::Connect {
        host: host.clone(),
        port,
        source,
    })?;

    let closed = Arc::new(AtomicBool::new(false));
    let handler = ClientHandler {
        policy: config.host_key_policy.clone(),
        host: host.clone(),
        port,
        closed: closed.clone(),
    };
    let mut handle = tokio::time::timeout(
        remaining(),
        russh::client::connect_stream(Arc::new(russh_config(config)), stream, handler),
    )
    .await
    .map_err(|_| timeout_error(Phase::Handshake))?
    .map_err(|e| match e {
        HandlerError::HostKey(e) => e,
        HandlerError::Ssh(source) => Error::Ssh {
            host: host.clone(),
            port,
            phase: Phase::Handshake,
            source,
        },
    })?;

    let target = Target {
        user: &config.user,
        host: &host,
        port,
    };
    tokio::time::timeout(
        remaining(),
        auth::authenticate(&mut handle, &target, &config.auth),
    )
    .await
    .map_err(|_| timeout_error(Phase::Auth))??;

    // Best effort: a failed ping shows up as a dead session right after.
    let _ = tokio::time::timeout(remaining(), handle.send_ping()).await;

    tracing::debug!(%host, port, id, elapsed = ?started.elapsed(), "connected");
    Ok(Session {
        handle,
        id,
        created: Instant::now(),
        closed,
        retired: AtomicBool::new(false),
        slots: AtomicU32::new(0),
        capacity: AtomicU32::new(config.channels_per_connection),
        sftp: tokio::sync::Mutex::new(None),
    })
}
