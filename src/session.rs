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
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpStream,
};

use crate::{
    auth::{self, AuthMethod, Target},
    builder::Config,
    error::{Error, Phase, Result},
    host_key::{ClientHandler, HandlerError, HostKeyPolicy},
    jump::{self, HopChain},
};

/// Refused channel opens after which a connection is replaced (about 70 KiB of russh
/// bookkeeping by then; see [`Session::note_refused_open`]).
pub(crate) const REFUSALS_BEFORE_RECYCLE: u32 = 128;

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
    /// The reusable SFTP channel, opened on first use.
    pub(crate) sftp: tokio::sync::Mutex<Option<Arc<crate::sftp::SftpChannel>>>,
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

/// One SSH server to reach: the target or a jump host.
#[derive(Clone, Copy)]
pub(crate) struct Peer<'a> {
    pub(crate) host: &'a str,
    pub(crate) port: u16,
    pub(crate) user: &'a str,
    pub(crate) auth: &'a [AuthMethod],
    pub(crate) policy: &'a HostKeyPolicy,
}

impl<'a> Peer<'a> {
    fn target(config: &'a Config) -> Self {
        Peer {
            host: &config.host,
            port: config.port,
            user: &config.user,
            auth: &config.auth,
            policy: &config.host_key_policy,
        }
    }
}

/// The `connect_timeout` budget of one peer: reaching it, the handshake and authentication.
#[derive(Clone, Copy)]
pub(crate) struct Budget {
    started: Instant,
    limit: Duration,
}

impl Budget {
    pub(crate) fn start(limit: Duration) -> Self {
        Budget {
            started: Instant::now(),
            limit,
        }
    }

    /// Runs `future` within what is left of the budget; running out names `peer` and `phase`.
    pub(crate) async fn run<T>(
        &self,
        peer: (&str, u16),
        phase: Phase,
        future: impl Future<Output = T>,
    ) -> Result<T> {
        let remaining = self.limit.saturating_sub(self.started.elapsed());
        tokio::time::timeout(remaining, future)
            .await
            .map_err(|_| Error::Timeout {
                host: peer.0.to_owned(),
                port: peer.1,
                phase,
                after: self.limit,
            })
    }
}

/// Opens the TCP connection to `peer`, with Nagle's algorithm off.
///
/// russh applies its `nodelay` setting only in `client::connect`, not to a stream handed to
/// `connect_stream`, so it is set here. Without it every command paid a ~40 ms stall (Nagle
/// holding our small packets until the server's delayed ACK): 48 ms instead of ~4 ms for a
/// warm `true` in the benchmark.
pub(crate) async fn tcp_connect(peer: &Peer<'_>, budget: &Budget) -> Result<TcpStream> {
    let stream = budget
        .run(
            (peer.host, peer.port),
            Phase::Connect,
            TcpStream::connect((peer.host, peer.port)),
        )
        .await?
        .map_err(|source| Error::Connect {
            host: peer.host.to_owned(),
            port: peer.port,
            source,
        })?;
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "could not disable Nagle's algorithm");
    }
    Ok(stream)
}

/// Runs the SSH handshake over `stream` (host key checked against `peer`'s own policy,
/// host and port), then authenticates as `peer`'s user. Returns the handle and the flag
/// the handler sets when the connection ends.
pub(crate) async fn handshake<S>(
    russh_config: Arc<russh::client::Config>,
    stream: S,
    peer: &Peer<'_>,
    budget: &Budget,
) -> Result<(Handle<ClientHandler>, Arc<AtomicBool>)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let closed = Arc::new(AtomicBool::new(false));
    let handler = ClientHandler {
        policy: peer.policy.clone(),
        host: peer.host.to_owned(),
        port: peer.port,
        closed: closed.clone(),
    };
    let place = (peer.host, peer.port);
    let mut handle = budget
        .run(
            place,
            Phase::Handshake,
            russh::client::connect_stream(russh_config, stream, handler),
        )
        .await?
        .map_err(|e| match e {
            HandlerError::HostKey(e) => e,
            HandlerError::Ssh(source) => Error::Ssh {
                host: peer.host.to_owned(),
                port: peer.port,
                phase: Phase::Handshake,
                source,
            },
        })?;
    let target = Target {
        user: peer.user,
        host: peer.host,
        port: peer.port,
    };
    budget
        .run(
            place,
            Phase::Auth,
            auth::authenticate(&mut handle, &target, peer.auth),
        )
        .await??;
    Ok((handle, closed))
}

/// Opens, verifies and authenticates a new connection, directly or through the configured
/// jump hosts, and pays the first-channel stall with a warm-up ping. Every step runs under
/// `connect_timeout`; with jump hosts, each hop and the target get a budget of their own
/// (as each `ssh` of an OpenSSH `ProxyJump` chain applies its own `ConnectTimeout`).
pub(crate) async fn dial(config: &Config, id: u64) -> Result<Session> {
    let started = Instant::now();
    let russh_config = Arc::new(russh_config(config));
    let peer = Peer::target(config);
    let (handle, closed, hops, budget) = if config.jump_hosts.is_empty() {
        let budget = Budget::start(config.connect_timeout);
        let stream = tcp_connect(&peer, &budget).await?;
        let (handle, closed) = handshake(russh_config, stream, &peer, &budget).await?;
        (handle, closed, None, budget)
    } else {
        let chain = jump::chain(config, russh_config.clone()).await?;
        // The target's budget starts once its last hop is up.
        let budget = Budget::start(config.connect_timeout);
        let stream = chain.open(peer.host, peer.port, &budget).await?;
        let (handle, closed) = handshake(russh_config, stream, &peer, &budget).await?;
        (handle, closed, Some(chain), budget)
    };

    // Best effort: a failed ping shows up as a dead session right after.
    let _ = budget
        .run((peer.host, peer.port), Phase::Handshake, handle.send_ping())
        .await;

    tracing::debug!(host = %peer.host, port = peer.port, id, hops = config.jump_hosts.len(),
        elapsed = ?started.elapsed(), "connected");
    Ok(Session {
        handle,
        id,
        created: Instant::now(),
        closed,
        retired: AtomicBool::new(false),
        slots: AtomicU32::new(0),
        running: AtomicU32::new(0),
        capacity: AtomicU32::new(config.channels_per_connection),
        refused_opens: AtomicU32::new(0),
        sftp: tokio::sync::Mutex::new(None),
        hops: std::sync::Mutex::new(hops),
    })
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
