//! Dialing one connection: TCP (or a jump-host channel), the SSH handshake with the host key
//! checked and authentication, all under one `connect_timeout` budget.

use std::{
    borrow::Cow,
    sync::{Arc, atomic::AtomicBool},
    time::{Duration, Instant},
};

use russh::client::Handle;
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpStream,
};

use crate::{
    config::{AuthMethod, Config, HostKeyPolicy},
    error::{Error, Phase, Result},
    ssh::{
        auth::{self, Target},
        forwarded::SharedRoutes,
        host_key::{ClientHandler, HandlerError},
        jump::{self, HopCache, HopChain},
        quick_ack::QuickAckStream,
    },
};

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

/// Opens the TCP connection to `peer`, with Nagle's algorithm off and ACKs sent at once.
///
/// russh applies its `nodelay` setting only in `client::connect`, not to a stream handed to
/// `connect_stream`, so it is set here. Without it every command paid a ~40 ms stall (Nagle
/// holding our small packets until the server's delayed ACK): 48 ms instead of ~4 ms for a
/// warm `true` in the benchmark. The mirror image, sshd's Nagle waiting for our delayed ACK,
/// is what [`QuickAckStream`] is for.
pub(crate) async fn tcp_connect(peer: &Peer<'_>, budget: &Budget) -> Result<QuickAckStream> {
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
    Ok(QuickAckStream::new(stream))
}

/// Runs the SSH handshake over `stream` (host key checked against `peer`'s own policy,
/// host and port), then authenticates as `peer`'s user. Returns the handle and the flag
/// the handler sets when the connection ends.
pub(crate) async fn handshake<S>(
    russh_config: Arc<russh::client::Config>,
    stream: S,
    peer: &Peer<'_>,
    budget: &Budget,
) -> Result<(Handle<ClientHandler>, Arc<AtomicBool>, SharedRoutes)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let closed = Arc::new(AtomicBool::new(false));
    let handler = ClientHandler {
        policy: peer.policy.clone(),
        host: peer.host.to_owned(),
        port: peer.port,
        closed: closed.clone(),
        forwarded: SharedRoutes::default(),
    };
    let forwarded = handler.forwarded.clone();
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
    Ok((handle, closed, forwarded))
}

/// A freshly authenticated connection, handed to the pool.
pub(crate) struct Connection {
    pub(crate) handle: Handle<ClientHandler>,
    /// Set by the handler when the connection ends.
    pub(crate) closed: Arc<AtomicBool>,
    /// The jump-host chain this connection runs through, if any.
    pub(crate) hops: Option<Arc<HopChain>>,
    /// The remote forwards requested on this connection.
    pub(crate) forwarded: SharedRoutes,
}

/// Opens, verifies and authenticates a new connection, directly or through the configured
/// jump hosts. (There used to be a warm-up ping here, against a first-channel stall; it
/// stalled too, on sshd's side: see [`QuickAckStream`], which took the first command on a new
/// connection from 47 ms to 6 ms on loopback.) Every step runs under
/// `connect_timeout`; with jump hosts, each hop and the target get a budget of their own
/// (as each `ssh` of an OpenSSH `ProxyJump` chain applies its own `ConnectTimeout`).
pub(crate) async fn dial(config: &Config, hop_cache: &HopCache, id: u64) -> Result<Connection> {
    let started = Instant::now();
    let russh_config = Arc::new(russh_config(config));
    let peer = Peer::target(config);
    let (handle, closed, forwarded, hops) = if config.jump_hosts.is_empty() {
        let budget = Budget::start(config.connect_timeout);
        let stream = tcp_connect(&peer, &budget).await?;
        let (handle, closed, forwarded) = handshake(russh_config, stream, &peer, &budget).await?;
        (handle, closed, forwarded, None)
    } else {
        let chain = jump::chain(config, hop_cache, russh_config.clone()).await?;
        // The target's budget starts once its last hop is up.
        let budget = Budget::start(config.connect_timeout);
        let stream = chain.open(peer.host, peer.port, &budget).await?;
        let (handle, closed, forwarded) = handshake(russh_config, stream, &peer, &budget).await?;
        (handle, closed, forwarded, Some(chain))
    };

    tracing::debug!(host = %peer.host, port = peer.port, id, hops = config.jump_hosts.len(),
        elapsed = ?started.elapsed(), "connected");
    Ok(Connection {
        handle,
        closed,
        hops,
        forwarded,
    })
}
