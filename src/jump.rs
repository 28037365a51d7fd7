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
//! does the same). Each target [`Session`](crate::session::Session) holds the chain in an
//! `Arc`; the cache keeps only a `Weak`, so the hop connections close once the last target
//! connection through them is gone, and a chain with a dead hop is replaced by a fresh one
//! at the next dial.

use std::{
    fmt,
    path::PathBuf,
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, Ordering},
    },
};

use russh::{
    ChannelOpenFailure,
    client::{Handle, Msg},
};
use tokio::net::TcpStream;

use crate::{
    auth::{AuthMethod, Secret},
    builder::{Config, SshExecutorBuilder},
    error::{Error, Phase, Result},
    host_key::{ClientHandler, HostKeyPolicy},
    session::{self, Budget, Peer},
};

/// One jump host of a chain (OpenSSH `ProxyJump`), for
/// [`SshExecutorBuilder::jump_host`].
///
/// Whatever is not set is inherited from the target: its user, its authentication methods
/// and its host-key policy (the hop's key is still looked up under the hop's own host and
/// port).
///
/// ```
/// use swiftide_ssh_executor::JumpHost;
///
/// let bastion = JumpHost::new("bastion.example.com")
///     .port(2222)
///     .user("jump")
///     .private_key_file("~/.ssh/id_bastion");
/// let same = JumpHost::parse("jump@bastion.example.com:2222")?;
/// # Ok::<(), swiftide_ssh_executor::Error>(())
/// ```
#[derive(Clone)]
#[must_use]
pub struct JumpHost {
    host: String,
    port: u16,
    user: Option<String>,
    auth: Vec<AuthMethod>,
    host_key_policy: Option<HostKeyPolicy>,
}

impl fmt::Debug for JumpHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Auth methods redact their secrets themselves.
        f.debug_struct("JumpHost")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("auth", &self.auth)
            .field("host_key_policy", &self.host_key_policy)
            .finish()
    }
}

impl JumpHost {
    /// A jump host reached at `host` (name or address, resolved by the previous hop, or
    /// locally for the first one).
    pub fn new(host: impl Into<String>) -> Self {
        JumpHost {
            host: host.into(),
            port: 22,
            user: None,
            auth: Vec::new(),
            host_key_policy: None,
        }
    }

    /// Parses an OpenSSH `ProxyJump` element: `[user@]host[:port]`, `[user@][v6addr]:port`
    /// or `ssh://[user@]host[:port]`.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty host or a bad port.
    pub fn parse(spec: &str) -> Result<Self> {
        let (user, host, port) = parse_spec(spec).map_err(|reason| Error::Config {
            reason: format!("jump host `{spec}`: {reason}"),
        })?;
        let mut hop = JumpHost::new(host);
        hop.user = user;
        hop.port = port.unwrap_or(22);
        Ok(hop)
    }

    /// The SSH port of the jump host. Defaults to 22.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// The login user on the jump host. Defaults to the target's user.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Adds an unencrypted private key file for this hop. Defaults to no methods of its
    /// own: the target's authentication methods are used.
    pub fn private_key_file(self, path: impl Into<PathBuf>) -> Self {
        self.auth_method(AuthMethod::KeyFile {
            path: path.into(),
            passphrase: None,
        })
    }

    /// Adds a private key file encrypted with `passphrase` for this hop. Defaults to the
    /// target's authentication methods.
    pub fn private_key_file_with_passphrase(
        self,
        path: impl Into<PathBuf>,
        passphrase: impl Into<Secret>,
    ) -> Self {
        self.auth_method(AuthMethod::KeyFile {
            path: path.into(),
            passphrase: Some(passphrase.into()),
        })
    }

    /// Adds the identities of the ssh-agent at `$SSH_AUTH_SOCK` for this hop. Defaults to
    /// the target's authentication methods.
    pub fn agent(self) -> Self {
        self.auth_method(AuthMethod::Agent { socket: None })
    }

    /// Adds password authentication for this hop. Defaults to the target's authentication
    /// methods.
    pub fn password(self, password: impl Into<Secret>) -> Self {
        self.auth_method(AuthMethod::Password(password.into()))
    }

    /// Adds any [`AuthMethod`] for this hop; methods are tried in the order added. Defaults
    /// to the target's authentication methods.
    pub fn auth_method(mut self, method: AuthMethod) -> Self {
        self.auth.push(method);
        self
    }

    /// Verifies this hop's host key strictly against this known_hosts file. Defaults to the
    /// target's host-key policy.
    pub fn known_hosts_file(self, path: impl Into<PathBuf>) -> Self {
        self.host_key_policy(HostKeyPolicy::Strict {
            known_hosts: vec![path.into()],
        })
    }

    /// Sets this hop's host-key policy. Defaults to the target's host-key policy.
    pub fn host_key_policy(mut self, policy: HostKeyPolicy) -> Self {
        self.host_key_policy = Some(policy);
        self
    }

    /// Fills what was not set from the target's settings.
    fn resolve(self, target: &Target<'_>) -> Result<Hop> {
        if self.host.is_empty() {
            return Err(Error::Config {
                reason: "a jump host needs a host".to_owned(),
            });
        }
        Ok(Hop {
            host: self.host,
            port: self.port,
            user: self.user.unwrap_or_else(|| target.user.to_owned()),
            auth: if self.auth.is_empty() {
                target.auth.to_vec()
            } else {
                self.auth
            },
            host_key_policy: self
                .host_key_policy
                .unwrap_or_else(|| target.policy.clone()),
        })
    }
}

impl std::str::FromStr for JumpHost {
    type Err = Error;

    fn from_str(spec: &str) -> Result<Self> {
        JumpHost::parse(spec)
    }
}

/// Splits `[user@]host[:port]`, `[user@][v6]:port` or `ssh://[user@]host[:port]` the way
/// OpenSSH's `parse_user_host_port` does (the user ends at the *last* `@`).
pub(crate) fn parse_spec(
    spec: &str,
) -> std::result::Result<(Option<String>, String, Option<u16>), String> {
    let rest = spec.strip_prefix("ssh://").unwrap_or(spec);
    if spec.starts_with("ssh://") && rest.contains('/') {
        return Err("an ssh:// jump host cannot have a path".to_owned());
    }
    let (user, hostport) = match rest.rsplit_once('@') {
        Some((user, hostport)) if !user.is_empty() => (Some(user.to_owned()), hostport),
        Some(_) => return Err("empty user name".to_owned()),
        None => (None, rest),
    };
    let (host, port) = split_host_port(hostport)?;
    if host.is_empty() {
        return Err("empty host".to_owned());
    }
    let port = port
        .map(|p| match p.parse::<u16>() {
            Ok(port) if port > 0 => Ok(port),
            _ => Err(format!("bad port `{p}`")),
        })
        .transpose()?;
    Ok((user, host.to_owned(), port))
}

fn split_host_port(hostport: &str) -> std::result::Result<(&str, Option<&str>), String> {
    if let Some(bracketed) = hostport.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or_else(|| "unclosed `[`".to_owned())?;
        return match after {
            "" => Ok((host, None)),
            _ => after
                .strip_prefix(':')
                .map(|port| (host, Some(port)))
                .ok_or_else(|| format!("unexpected `{after}` after `]`")),
        };
    }
    // A bare IPv6 address has several colons and no port.
    match hostport.split_once(':') {
        Some((host, port)) if !port.contains(':') => Ok((host, Some(port))),
        _ => Ok((hostport, None)),
    }
}

/// The target's settings that hops inherit.
pub(crate) struct Target<'a> {
    pub(crate) user: &'a str,
    pub(crate) auth: &'a [AuthMethod],
    pub(crate) policy: &'a HostKeyPolicy,
}

/// Resolves the builder's hops against the target's settings.
pub(crate) fn resolve_hops(hops: Vec<JumpHost>, target: &Target<'_>) -> Result<Vec<Hop>> {
    hops.into_iter().map(|hop| hop.resolve(target)).collect()
}

/// A jump host with every setting decided.
#[derive(Clone)]
pub(crate) struct Hop {
    host: String,
    port: u16,
    user: String,
    auth: Vec<AuthMethod>,
    host_key_policy: HostKeyPolicy,
}

impl fmt::Debug for Hop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}:{}", self.user, self.host, self.port)
    }
}

impl Hop {
    fn peer(&self) -> Peer<'_> {
        Peer {
            host: &self.host,
            port: self.port,
            user: &self.user,
            auth: &self.auth,
            policy: &self.host_key_policy,
        }
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
    ) -> Result<HopChain> {
        let mut links: Vec<Link> = Vec::with_capacity(hops.len());
        for hop in hops {
            let peer = hop.peer();
            let budget = Budget::start(config.connect_timeout);
            let (handle, closed) = match links.last() {
                None => {
                    let stream: TcpStream = session::tcp_connect(&peer, &budget).await?;
                    session::handshake(russh_config.clone(), stream, &peer, &budget).await?
                }
                Some(previous) => {
                    let stream = forward(previous, &hop.host, hop.port, &budget).await?;
                    session::handshake(russh_config.clone(), stream, &peer, &budget).await?
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
            cache: config.hop_cache.clone(),
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

fn describe_open_failure(reason: &ChannelOpenFailure) -> String {
    match reason {
        ChannelOpenFailure::AdministrativelyProhibited => {
            "administratively prohibited (forwarding disabled or not permitted)".to_owned()
        }
        ChannelOpenFailure::ConnectFailed => "connect failed".to_owned(),
        ChannelOpenFailure::UnknownChannelType => "direct-tcpip is not supported".to_owned(),
        ChannelOpenFailure::ResourceShortage => "resource shortage".to_owned(),
        ChannelOpenFailure::Other { code, reason } => format!("{reason} (code {code})"),
    }
}

/// The executor's live chain, or a freshly connected one.
pub(crate) async fn chain(
    config: &Config,
    russh_config: Arc<russh::client::Config>,
) -> Result<Arc<HopChain>> {
    let first = config
        .jump_hosts
        .first()
        .map(|hop| (hop.host.as_str(), hop.port))
        .unwrap_or((config.host.as_str(), config.port));
    // The lock is held while a chain connects, so it may wait that long: bound the wait.
    let wait = Budget::start(config.connect_timeout * (config.jump_hosts.len() as u32 + 1));
    let mut cached = wait
        .run(first, Phase::Connect, config.hop_cache.0.lock())
        .await?;
    if let Some(chain) = cached.upgrade().filter(|chain| !chain.is_dead()) {
        return Ok(chain);
    }
    let chain = Arc::new(HopChain::connect(&config.jump_hosts, russh_config, config).await?);
    *cached = Arc::downgrade(&chain);
    Ok(chain)
}

/// Jump-host settings of the builder.
impl SshExecutorBuilder {
    /// Adds a jump host (OpenSSH `ProxyJump`): connections go through the hops in the order
    /// they were added, the first one reached directly. Each hop is authenticated and its
    /// host key verified on its own; settings a hop does not have are taken from the target
    /// (see [`JumpHost`]). One connection per hop carries all of the executor's pooled
    /// connections, and it stays open as long as they do. The first call replaces the
    /// hops read from an ssh_config `ProxyJump`. Defaults to none: a direct connection.
    pub fn jump_host(mut self, hop: JumpHost) -> Self {
        if self.jump_hosts_from_file {
            self.jump_hosts.clear();
            self.jump_hosts_from_file = false;
        }
        self.jump_hosts.push(hop);
        self
    }

    /// Replaces every jump host with `hops`, in order; an empty list connects directly
    /// (OpenSSH `ProxyJump none`). Defaults to none: a direct connection.
    pub fn jump_hosts(mut self, hops: impl IntoIterator<Item = JumpHost>) -> Self {
        self.jump_hosts = hops.into_iter().collect();
        self.jump_hosts_from_file = false;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proxy_jump_elements_like_openssh() {
        let ok = |s: &str| parse_spec(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(ok("host"), (None, "host".into(), None));
        assert_eq!(ok("u@h:2200"), (Some("u".into()), "h".into(), Some(2200)));
        assert_eq!(
            ok("a@b@h"),
            (Some("a@b".into()), "h".into(), None),
            "the user ends at the last @"
        );
        assert_eq!(ok("ssh://u@h:22"), (Some("u".into()), "h".into(), Some(22)));
        assert_eq!(ok("[::1]:2222"), (None, "::1".into(), Some(2222)));
        assert_eq!(ok("[::1]"), (None, "::1".into(), None));
        assert_eq!(ok("fe80::1"), (None, "fe80::1".into(), None));
        for bad in [
            "",
            "u@",
            "@h",
            "h:0",
            "h:x",
            "h:70000",
            "[::1",
            "[::1]x",
            "ssh://h/p",
        ] {
            assert!(parse_spec(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn hops_inherit_what_they_do_not_set() {
        let target_auth = vec![AuthMethod::Password(Secret::new("pw"))];
        let policy = HostKeyPolicy::InsecureAcceptAnyHostKey;
        let target = Target {
            user: "ci",
            auth: &target_auth,
            policy: &policy,
        };
        let hops = resolve_hops(
            vec![
                JumpHost::new("a"),
                JumpHost::new("b")
                    .user("jump")
                    .port(2)
                    .private_key_file("/k")
                    .known_hosts_file("/kh"),
            ],
            &target,
        )
        .unwrap_or_default();
        assert_eq!(format!("{hops:?}"), "[ci@a:22, jump@b:2]");
        assert!(matches!(hops[0].auth[..], [AuthMethod::Password(_)]));
        assert!(matches!(
            hops[0].host_key_policy,
            HostKeyPolicy::InsecureAcceptAnyHostKey
        ));
        assert!(matches!(hops[1].auth[..], [AuthMethod::KeyFile { .. }]));
        assert!(matches!(
            hops[1].host_key_policy,
            HostKeyPolicy::Strict { .. }
        ));
        assert!(resolve_hops(vec![JumpHost::new("")], &target).is_err());
    }
}
