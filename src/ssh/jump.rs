//! Jump hosts (OpenSSH `ProxyJump`): reaching the target through a chain of SSH servers.
//!
//! The first hop is reached over TCP; every later hop, and finally the target, through a
//! `direct-tcpip` channel opened on the previous hop, over which a complete SSH connection
//! runs (`russh::client::connect_stream`). Each hop is authenticated and host-key-checked on
//! its own, against its own host and port, before anything travels through it.
//!
//! # One chain per executor
//!
//! The pooled connections of one executor share a single chain of hop connections:
//! `direct-tcpip` channels do not count against a jump host's `MaxSessions`, so one
//! connection per hop carries every pooled target connection (OpenSSH's `ControlMaster`
//! does the same). Each pooled connection holds the chain in an
//! `Arc`; the cache keeps only a `Weak`, so the hop connections close once the last target
//! connection through them is gone, and a chain with a dead hop is replaced by a fresh one
//! at the next dial.

use std::{
    fmt,
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, Ordering},
    },
};

use russh::{
    ChannelOpenFailure,
    client::{Handle, Msg},
};

use crate::{
    config::{Config, Hop},
    error::{Error, Phase, Result},
    ssh::{
        connect::{self, Budget, Peer},
        host_key::ClientHandler,
    },
};

/// The server a hop names, with the settings to reach it.
fn peer(hop: &Hop) -> Peer<'_> {
    Peer {
        host: &hop.host,
        port: hop.port,
        user: &hop.user,
        auth: &hop.auth,
        policy: &hop.host_key_policy,
    }
}

/// The executor's current chain, if one is alive (see the module docs).
#[derive(Clone, Default)]
pub(crate) struct HopCache(Arc<tokio::sync::Mutex<Weak<HopChain>>>);

impl fmt::Debug for HopCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HopCache")
    }
}

impl HopCache {
    /// Forgets `chain` if it is still the cached one, so the next dial builds a new chain.
    async fn evict(&self, chain: &Arc<HopChain>) {
        let mut cached = self.0.lock().await;
        if std::ptr::eq(cached.as_ptr(), Arc::as_ptr(chain)) {
            *cached = Weak::new();
        }
    }
}

/// One authenticated connection of a chain.
struct Link {
    handle: Handle<ClientHandler>,
    closed: Arc<AtomicBool>,
    host: String,
    port: u16,
}

/// Authenticated connections to every hop, in order; the last one forwards to the target.
pub(crate) struct HopChain {
    links: Vec<Link>,
    cache: HopCache,
}

impl fmt::Debug for HopChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.links.iter().map(|l| format!("{}:{}", l.host, l.port)))
            .finish()
    }
}

impl HopChain {
    /// Whether any hop connection has ended; everything through it is gone too.
    pub(crate) fn is_dead(&self) -> bool {
        self.links
            .iter()
            .any(|l| l.closed.load(Ordering::Acquire) || l.handle.is_closed())
    }

    /// Opens a `direct-tcpip` channel from the last hop to `host:port`, as a byte stream.
    pub(crate) async fn open(
        self: &Arc<Self>,
        host: &str,
        port: u16,
        budget: &Budget,
    ) -> Result<russh::ChannelStream<Msg>> {
        let Some(last) = self.links.last() else {
            return Err(Error::Config {
                reason: "an empty jump host chain".to_owned(),
            });
        };
        let opened = forward(last, host, port, budget).await;
        if opened.is_err() && !matches!(opened, Err(Error::JumpForward { .. })) {
            // A silent or broken last hop: do not hand this chain to the next dial.
            self.cache.evict(self).await;
        }
        opened
    }

    /// Connects every hop in turn, each through the one before.
    async fn connect(
        hops: &[Hop],
        russh_config: Arc<russh::client::Config>,
        config: &Config,
        cache: &HopCache,
    ) -> Result<HopChain> {
        let mut links: Vec<Link> = Vec::with_capacity(hops.len());
        for hop in hops {
            let peer = peer(hop);
            let budget = Budget::start(config.connect_timeout);
            // A jump host's own forwards are never requested: its routing table stays empty.
            let (handle, closed, _forwarded) = match links.last() {
                None => {
                    let stream = connect::tcp_connect(&peer, &budget).await?;
                    connect::handshake(russh_config.clone(), stream, &peer, &budget).await?
                }
                Some(previous) => {
                    let stream = forward(previous, &hop.host, hop.port, &budget).await?;
                    connect::handshake(russh_config.clone(), stream, &peer, &budget).await?
                }
            };
            tracing::debug!(host = %hop.host, port = hop.port, "jump host connected");
            links.push(Link {
                handle,
                closed,
                host: hop.host.clone(),
                port: hop.port,
            });
        }
        Ok(HopChain {
            links,
            cache: cache.clone(),
        })
    }
}

/// Asks `via` to open a `direct-tcpip` channel to `host:port`.
async fn forward(
    via: &Link,
    host: &str,
    port: u16,
    budget: &Budget,
) -> Result<russh::ChannelStream<Msg>> {
    // OpenSSH's `ssh -W` also reports 127.0.0.1 and port 0 as the originator.
    let channel = budget
        .run(
            (host, port),
            Phase::Connect,
            via.handle
                .channel_open_direct_tcpip(host, u32::from(port), "127.0.0.1", 0),
        )
        .await?
        .map_err(|e| match e {
            russh::Error::ChannelOpenFailure(reason) => Error::JumpForward {
                jump_host: via.host.clone(),
                jump_port: via.port,
                host: host.to_owned(),
                port,
                reason: describe_open_failure(&reason),
            },
            source => Error::Ssh {
                host: via.host.clone(),
                port: via.port,
                phase: Phase::ChannelOpen,
                source,
            },
        })?;
    Ok(channel.into_stream())
}

/// The server's reason for refusing a forwarding channel, in words.
pub(crate) fn describe_open_failure(reason: &ChannelOpenFailure) -> String {
    match reason {
        ChannelOpenFailure::AdministrativelyProhibited => {
            "administratively prohibited (forwarding disabled or not permitted)".to_owned()
        }
        ChannelOpenFailure::ConnectFailed => "connect failed".to_owned(),
        ChannelOpenFailure::UnknownChannelType => {
            "the server does not forward this channel type".to_owned()
        }
        ChannelOpenFailure::ResourceShortage => "resource shortage".to_owned(),
        ChannelOpenFailure::Other { code, reason } => format!("{reason} (code {code})"),
    }
}

/// The executor's live chain, or a freshly connected one.
pub(crate) async fn chain(
    config: &Config,
    cache: &HopCache,
    russh_config: Arc<russh::client::Config>,
) -> Result<Arc<HopChain>> {
    let first = config
        .jump_hosts
        .first()
        .map(|hop| (hop.host.as_str(), hop.port))
        .unwrap_or((config.host.as_str(), config.port));
    // The lock is held while a chain connects, so it may wait that long: bound the wait.
    let peers = u32::try_from(config.jump_hosts.len().saturating_add(1)).unwrap_or(u32::MAX);
    let wait = Budget::start(config.connect_timeout.saturating_mul(peers));
    let mut cached = wait.run(first, Phase::Connect, cache.0.lock()).await?;
    if let Some(chain) = cached.upgrade().filter(|chain| !chain.is_dead()) {
        return Ok(chain);
    }
    let chain = Arc::new(HopChain::connect(&config.jump_hosts, russh_config, config, cache).await?);
    *cached = Arc::downgrade(&chain);
    Ok(chain)
}
