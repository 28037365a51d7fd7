//! Port forwards through the host, as OpenSSH's `ssh -L`, `-D` and `-R` make them:
//!
//! * [`SshExecutor::forward_local`] / [`forward_local_to_socket`](SshExecutor::forward_local_to_socket):
//!   a listener here; each connection to it becomes a `direct-tcpip` (or
//!   `direct-streamlocal@openssh.com`) channel to a fixed target reached from the host.
//! * [`SshExecutor::forward_dynamic`]: a local SOCKS5 proxy; each `CONNECT` becomes a channel
//!   to the destination the client names, resolved on the host.
//! * [`SshExecutor::forward_remote`] / [`forward_remote_streams`](SshExecutor::forward_remote_streams):
//!   a listener on the host (`tcpip-forward`); each connection to it is served to a local
//!   address, or handed to the caller as a stream.
//!
//! Each forward has a connection of its own (see [`link::Link`] for why not the commands'),
//! dialed with the executor's settings: jump hosts, authentication, host keys. When that
//! connection is lost, the forward stays: a local listener keeps listening and its next
//! stream dials a new connection; a remote forward asks the new connection for its port
//! again. Streams in flight on the lost connection end with a reset, not a hang.

pub(crate) mod link;
mod pipe;
mod remote;
mod socks;
mod spec;
pub(crate) mod tools;

use std::{
    fmt,
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{
    net::{TcpListener, TcpSocket, TcpStream},
    task::{JoinHandle, JoinSet},
};

pub use remote::{ForwardedConnection, RemoteForward};
pub use spec::{Forward, ForwardSpec, HostListener};

use crate::{
    error::{Error, ForwardRefusal, Result},
    executor::SshExecutor,
};
use link::Link;
use pipe::{Ended, OpenStream};

/// Where a forward's streams go: for a local forward (`-L`), reached from the host; for a
/// remote one (`-R`), reached from this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForwardTarget {
    /// A TCP address, resolved where the connection is made (`localhost:8080`,
    /// `10.0.0.7:5432`).
    Tcp {
        /// A host name or IP address.
        host: String,
        /// The port.
        port: u16,
    },
    /// A Unix socket (`/run/postgresql/.s.PGSQL.5432`).
    UnixSocket(PathBuf),
}

impl fmt::Display for ForwardTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForwardTarget::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            ForwardTarget::Tcp { host, port } => write!(f, "{host}:{port}"),
            ForwardTarget::UnixSocket(path) => write!(f, "{}", path.display()),
        }
    }
}

/// A forward's counts, from [`LocalForward::stats`] or [`RemoteForward::stats`]. The pool's
/// [`PoolStats`](crate::PoolStats) adds up every forward of the executor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForwardStats {
    /// Streams open right now.
    pub open_streams: u64,
    /// Streams opened so far (accepted connections, refused ones included).
    pub streams: u64,
    /// Streams that failed: refused by the server (the target refused the connection,
    /// forwarding not allowed), or broken by a lost connection.
    pub failed_streams: u64,
    /// Bytes sent towards the host (and its target), all streams.
    pub bytes_to_host: u64,
    /// Bytes received from the host, all streams.
    pub bytes_from_host: u64,
}

/// The counters behind [`ForwardStats`], shared by a forward's streams.
#[derive(Debug, Default)]
pub(crate) struct ForwardCounters {
    open: AtomicU64,
    opened: AtomicU64,
    failed: AtomicU64,
    bytes_to_host: AtomicU64,
    bytes_from_host: AtomicU64,
}

impl ForwardCounters {
    fn snapshot(&self) -> ForwardStats {
        ForwardStats {
            open_streams: self.open.load(Ordering::Relaxed),
            streams: self.opened.load(Ordering::Relaxed),
            failed_streams: self.failed.load(Ordering::Relaxed),
            bytes_to_host: self.bytes_to_host.load(Ordering::Relaxed),
            bytes_from_host: self.bytes_from_host.load(Ordering::Relaxed),
        }
    }
}

/// A forward's background task (its listener, or its remote forward's keeper), ended when
/// the forward is closed or dropped. Dropping aborts it: best effort, since the abort
/// takes effect at the runtime's next turn (at once while the runtime runs).
#[derive(Debug)]
pub(crate) struct ForwardTask(Option<JoinHandle<()>>);

impl ForwardTask {
    fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        Self(Some(tokio::spawn(task)))
    }

    /// Ends the task and waits until it has let go of everything it held.
    async fn stop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
            task.await.ok();
        }
    }
}

impl Drop for ForwardTask {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// What a local listener does with a connection.
#[derive(Debug, Clone)]
pub(crate) enum Listening {
    /// `ssh -L`: every connection to the same target.
    Fixed(ForwardTarget),
    /// `ssh -D`: the target each SOCKS5 client names.
    Socks,
}

/// A local (`ssh -L`) or dynamic (`ssh -D`) forward: a listener on this machine whose
/// connections are carried to the host.
///
/// [`close`](Self::close) stops the listener (the port is free when it returns) and ends the
/// streams in flight. **Dropping** it does the same, best effort: the listener's task is
/// aborted and closes the socket at the runtime's next turn (at once while the runtime
/// runs; never, if the runtime is gone, in which case the process is ending anyway).
#[derive(Debug)]
pub struct LocalForward {
    local_addr: SocketAddr,
    description: String,
    counters: Arc<ForwardCounters>,
    task: ForwardTask,
}

impl LocalForward {
    /// The address the listener is bound to (with the port the system picked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This forward's streams and bytes so far.
    pub fn stats(&self) -> ForwardStats {
        self.counters.snapshot()
    }

    /// Stops listening and ends every stream in flight (their local sockets are reset,
    /// their channels closed). The listener's port is free once this returns.
    pub async fn close(mut self) {
        self.task.stop().await;
    }
}

impl fmt::Display for LocalForward {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.local_addr, self.description)
    }
}

impl SshExecutor {
    /// Forwards connections to `bind` (on this machine) to `host:port` as the host reaches
    /// it: `ssh -L bind:host:port`. Port 0 in `bind` picks a free port
    /// ([`LocalForward::local_addr`] says which). `bind` is taken as given: `127.0.0.1:0`
    /// (loopback only) unless the caller names another address.
    ///
    /// Connects at once (a connection of the forward's own, see the [module docs](self)),
    /// so that refused credentials or an unreachable host fail here. A target that refuses,
    /// or a server that does not allow the forward (`AllowTcpForwarding`, `PermitOpen`),
    /// shows per stream: the local client's connection is reset at once, and
    /// [`ForwardStats::failed_streams`] counts it.
    ///
    /// # Errors
    /// [`Error::ForwardLocal`] when `bind` cannot be bound; connection errors as
    /// [`build`](crate::SshExecutorBuilder::build) reports them; [`Error::Closed`].
    pub async fn forward_local(
        &self,
        bind: SocketAddr,
        host: impl Into<String>,
        port: u16,
    ) -> Result<LocalForward> {
        let target = ForwardTarget::Tcp {
            host: host.into(),
            port,
        };
        self.listen(bind, Listening::Fixed(target)).await
    }

    /// Forwards connections to `bind` to the Unix socket `path` on the host
    /// (`ssh -L bind:/path`, a `direct-streamlocal@openssh.com` channel; OpenSSH's
    /// `AllowStreamLocalForwarding` decides). As [`forward_local`](Self::forward_local)
    /// otherwise.
    ///
    /// # Errors
    /// As [`forward_local`](Self::forward_local).
    pub async fn forward_local_to_socket(
        &self,
        bind: SocketAddr,
        path: impl Into<PathBuf>,
    ) -> Result<LocalForward> {
        self.listen(
            bind,
            Listening::Fixed(ForwardTarget::UnixSocket(path.into())),
        )
        .await
    }

    /// A SOCKS5 proxy on `bind` whose connections the host makes: `ssh -D bind`. Clients
    /// name their destination (`CONNECT`; no authentication, as `ssh -D`); a hostname is
    /// resolved by the host (`curl --socks5-hostname`, `socks5h://` URLs). A destination
    /// the host cannot reach, or the server does not allow, gets SOCKS5's reply code for it
    /// (connection refused, not allowed, host unreachable) at once.
    ///
    /// # Errors
    /// As [`forward_local`](Self::forward_local).
    pub async fn forward_dynamic(&self, bind: SocketAddr) -> Result<LocalForward> {
        self.listen(bind, Listening::Socks).await
    }

    pub(crate) async fn listen(
        &self,
        bind: SocketAddr,
        listening: Listening,
    ) -> Result<LocalForward> {
        let mut audit = self.audit(match listening {
            Listening::Fixed(_) => "forward_local",
            Listening::Socks => "forward_dynamic",
        })?;
        let result = self.listen_unaudited(bind, listening).await;
        if let Ok(forward) = &result {
            audit.note(|record| {
                record.path = Some(format!("{} to {}", forward.local_addr, forward.description));
            });
        }
        audit.end_with(&result);
        result
    }

    /// [`listen`](Self::listen) without its audit record.
    async fn listen_unaudited(
        &self,
        bind: SocketAddr,
        listening: Listening,
    ) -> Result<LocalForward> {
        let link = Arc::new(Link::new(self.inner.clone()));
        link.session().await?;
        let (listener, local_addr) = bind_listener(bind).map_err(|source| Error::ForwardLocal {
            operation: "bind",
            address: bind.to_string(),
            source,
        })?;
        let description = match &listening {
            Listening::Fixed(target) => format!("{target} on {}", self.host()),
            Listening::Socks => format!("SOCKS5 through {}", self.host()),
        };
        tracing::debug!(%local_addr, to = %description, "forward listening");
        let counters = Arc::new(ForwardCounters::default());
        let task = ForwardTask::spawn(serve(listener, link, listening, counters.clone()));
        Ok(LocalForward {
            local_addr,
            description,
            counters,
            task,
        })
    }
}

/// How many connections the kernel queues for a listener before it accepts them (capped by
/// `net.core.somaxconn`, 4096 on current Linux). A burst of 1,000 clients overflowed tokio's
/// default of 1,024 on a busy runtime (the kernel dropped 110 of them); OpenSSH's `ssh -L`
/// listens with 128.
const LISTEN_BACKLOG: u32 = 4096;

/// Binds a listener as `TcpListener::bind` does (`SO_REUSEADDR`), with [`LISTEN_BACKLOG`];
/// returns it with the address it got.
fn bind_listener(bind: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let socket = if bind.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(bind)?;
    let listener = socket.listen(LISTEN_BACKLOG)?;
    let local_addr = listener.local_addr()?;
    Ok((listener, local_addr))
}

/// A local listener's loop: each connection a task of its own, all of them ended with it.
async fn serve(
    listener: TcpListener,
    link: Arc<Link>,
    listening: Listening,
    counters: Arc<ForwardCounters>,
) {
    let mut streams = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    streams.spawn(local_stream(
                        stream,
                        peer,
                        link.clone(),
                        listening.clone(),
                        counters.clone(),
                    ));
                }
                // Out of descriptors, or a connection reset before it was accepted: the
                // listener itself is fine; pause so a full descriptor table is not spun on.
                Err(error) => {
                    tracing::debug!(%error, "forward: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = streams.join_next(), if !streams.is_empty() => {}
        }
    }
}

/// One connection to a local listener, from its SOCKS5 request (for `-D`) to its end.
async fn local_stream(
    mut stream: TcpStream,
    peer: SocketAddr,
    link: Arc<Link>,
    listening: Listening,
    counters: Arc<ForwardCounters>,
) {
    stream.set_nodelay(true).ok();
    let open = OpenStream::new(counters.clone(), link.pool().clone());
    let socks = matches!(listening, Listening::Socks);
    let target = match listening {
        Listening::Fixed(target) => target,
        Listening::Socks => match socks::accept(&mut stream).await {
            Ok(Some((host, port))) => ForwardTarget::Tcp { host, port },
            Ok(None) => return,
            Err(error) => {
                tracing::debug!(%peer, %error, "forward: not a SOCKS5 request");
                open.failed();
                return;
            }
        },
    };
    let channel = match link
        .open(&target, (&peer.ip().to_string(), u32::from(peer.port())))
        .await
    {
        Ok(channel) => channel,
        Err(error) => {
            tracing::debug!(%peer, %target, %error, "forward: stream refused");
            open.failed();
            if socks {
                socks::reply(&mut stream, socks_code(&error)).await.ok();
            } else {
                // A reset, as a refused connect gives: the client learns at once.
                stream.set_zero_linger().ok();
            }
            return;
        }
    };
    if socks
        && socks::reply(&mut stream, socks::Reply::Succeeded)
            .await
            .is_err()
    {
        return;
    }
    if let Ended::Broken(error) = pipe::pump(&mut stream, channel, &counters).await {
        tracing::debug!(%peer, %target, %error, "forward: stream broken");
        open.failed();
        stream.set_zero_linger().ok();
    }
}

/// The SOCKS5 reply for a channel the server would not open.
fn socks_code(error: &Error) -> socks::Reply {
    match error {
        Error::ForwardRefused { refusal, .. } => match refusal {
            ForwardRefusal::ConnectFailed => socks::Reply::ConnectionRefused,
            ForwardRefusal::Prohibited => socks::Reply::NotAllowed,
            _ => socks::Reply::HostUnreachable,
        },
        _ => socks::Reply::GeneralFailure,
    }
}
