//! Remote forwards (`ssh -R`): a listener on the host, asked for with `tcpip-forward` (or
//! `streamlocal-forward@openssh.com` for a Unix socket), whose connections the server opens
//! to us as `forwarded-tcpip` (`forwarded-streamlocal@openssh.com`) channels.

use std::{
    fmt,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use russh::{ChannelStream, client::Msg};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpStream, UnixStream},
    sync::{mpsc, watch},
    task::JoinSet,
};

use super::{
    ForwardCounters, ForwardStats, ForwardTarget, ForwardTask, HostListener, link::Link, pipe,
    pipe::OpenStream,
};
use crate::{
    error::{Error, ForwardRefusal, Result},
    executor::SshExecutor,
    pool::Session,
    ssh::{ForwardedStream, Listener},
};

/// Connections accepted on the host and not yet taken by the forward's task.
const WAITING_STREAMS: usize = 256;
/// How often a remote forward looks whether its connection is still there.
const WATCH_CONNECTION: Duration = Duration::from_millis(200);

/// A remote forward (`ssh -R`): the host listens, and each connection to its port (or Unix
/// socket) is carried here, to a local address ([`SshExecutor::forward_remote`],
/// [`SshExecutor::forward_remote_socket`]) or to the caller
/// ([`SshExecutor::forward_remote_streams`]).
///
/// When its connection is lost (the server restarted), the forward dials again and asks for
/// the same port; [`remote_port`](Self::remote_port) changes only when that port was picked
/// by the server and is now taken. (A Unix socket is asked for again at the same path; sshd
/// refuses that while the lost connection's socket file is still there, unless its
/// `StreamLocalBindUnlink` is `yes`: the forward keeps asking.) [`close`](Self::close)
/// cancels the listener on the host (`cancel-tcpip-forward`) and ends the streams in
/// flight. **Dropping** it ends its task (best effort, at the runtime's next turn) and with
/// it the forward's connection, which takes the host's listener along.
#[derive(Debug)]
pub struct RemoteForward {
    /// Where the host listens, as asked for.
    on_host: HostListener,
    /// What its connections are carried to, for display.
    description: String,
    port: watch::Receiver<u16>,
    counters: Arc<ForwardCounters>,
    link: Arc<Link>,
    task: ForwardTask,
}

impl RemoteForward {
    /// The port the host listens on (the one the server picked when 0 was asked for); 0
    /// for a Unix socket.
    pub fn remote_port(&self) -> u16 {
        *self.port.borrow()
    }

    /// The address the host listens on, as it was asked for; for a Unix socket, its path.
    pub fn remote_bind(&self) -> &str {
        match &self.on_host {
            HostListener::Tcp { bind, .. } => bind,
            HostListener::UnixSocket(path) => path,
        }
    }

    /// This forward's streams and bytes so far.
    pub fn stats(&self) -> ForwardStats {
        self.counters.snapshot()
    }

    /// Cancels the listener on the host and ends the streams in flight.
    pub async fn close(mut self) {
        self.task.stop().await;
        let listening = self.listening();
        if let Ok(session) = self.link.session().await {
            session.forwarded.remove(&listening.route());
            if let Some(handle) = session.handle() {
                match &listening {
                    HostListener::Tcp { bind, port } => {
                        handle
                            .cancel_tcpip_forward(bind.as_str(), u32::from(*port))
                            .await
                    }
                    HostListener::UnixSocket(path) => {
                        handle.cancel_streamlocal_forward(path.as_str()).await
                    }
                }
                .ok();
            }
        }
    }

    /// Where the host listens now (with the port the server picked).
    fn listening(&self) -> HostListener {
        match &self.on_host {
            HostListener::Tcp { bind, .. } => HostListener::Tcp {
                bind: bind.clone(),
                port: self.remote_port(),
            },
            socket => socket.clone(),
        }
    }
}

impl fmt::Display for RemoteForward {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.listening(), self.description)
    }
}

impl HostListener {
    /// The key the connection's handler routes this listener's channels by.
    fn route(&self) -> Listener {
        match self {
            HostListener::Tcp { port, .. } => Listener::Port(u32::from(*port)),
            HostListener::UnixSocket(path) => Listener::Socket(path.clone()),
        }
    }
}

/// A connection to a remote forward's port on the host, handed to the caller by
/// [`SshExecutor::forward_remote_streams`]: bytes both ways (`AsyncRead` + `AsyncWrite`;
/// `shutdown` sends the host's peer an EOF). Counted as an open stream of its forward
/// until dropped; dropping it closes the channel.
pub struct ForwardedConnection {
    stream: ChannelStream<Msg>,
    originator: (String, u32),
    _open: OpenStream,
}

impl ForwardedConnection {
    /// The address and port of the peer that connected on the host, as the server reports
    /// them (`("", 0)` for a connection to a Unix socket: the server names none).
    pub fn originator(&self) -> (&str, u32) {
        (&self.originator.0, self.originator.1)
    }
}

impl fmt::Debug for ForwardedConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForwardedConnection")
            .field("originator", &self.originator)
            .finish_non_exhaustive()
    }
}

impl AsyncRead for ForwardedConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ForwardedConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Where a remote forward's streams go.
#[derive(Debug)]
pub(super) enum Deliver {
    /// Each connected to this target (from this machine) and pumped.
    To(ForwardTarget),
    /// Each handed to the caller.
    Caller(mpsc::Sender<ForwardedConnection>),
}

impl SshExecutor {
    /// Asks the host to listen on `bind:port` and carries each connection to it to `local`
    /// on this machine: `ssh -R bind:port:local`. Port 0 lets the server pick
    /// ([`RemoteForward::remote_port`]). `bind` as OpenSSH takes it: `localhost` (or
    /// `127.0.0.1`) for the host's loopback; `""`, `*` or `0.0.0.0` for every address,
    /// which sshd grants only with `GatewayPorts clientspecified` (otherwise it listens on
    /// loopback).
    ///
    /// A connection that `local` refuses is closed on the host's side at once.
    ///
    /// # Errors
    /// [`Error::ForwardRefused`] when the server will not listen there (`PermitListen`,
    /// `AllowTcpForwarding no` or `local`, the port in use, a privileged port for a
    /// non-root login), at once; connection errors; [`Error::Closed`].
    pub async fn forward_remote(
        &self,
        bind: impl Into<String>,
        port: u16,
        local: SocketAddr,
    ) -> Result<RemoteForward> {
        let on_host = HostListener::Tcp {
            bind: bind.into(),
            port,
        };
        self.remote(on_host, Deliver::To(local_target(local))).await
    }

    /// Asks the host to listen on the Unix socket `path` and carries each connection to it
    /// to `local` on this machine: `ssh -R /path:local` (`streamlocal-forward@openssh.com`;
    /// OpenSSH's `AllowStreamLocalForwarding` decides, and creates the socket with its
    /// `StreamLocalBindMask`, 0177 by default: only the login user can connect). A path
    /// that already exists is refused unless the server's `StreamLocalBindUnlink` is `yes`.
    /// [`close`](RemoteForward::close) removes the socket on the host.
    ///
    /// # Errors
    /// As [`forward_remote`](Self::forward_remote); Dropbear has no Unix socket forwards
    /// and refuses with [`Error::ForwardRefused`].
    pub async fn forward_remote_socket(
        &self,
        path: impl Into<String>,
        local: SocketAddr,
    ) -> Result<RemoteForward> {
        let on_host = HostListener::UnixSocket(path.into());
        self.remote(on_host, Deliver::To(local_target(local))).await
    }

    /// As [`forward_remote`](Self::forward_remote), but each connection to the host's port
    /// is handed to the caller through the returned receiver. Up to 256 connections wait
    /// there; more are refused on the host's side while the caller does not take them.
    ///
    /// # Errors
    /// As [`forward_remote`](Self::forward_remote).
    pub async fn forward_remote_streams(
        &self,
        bind: impl Into<String>,
        port: u16,
    ) -> Result<(RemoteForward, mpsc::Receiver<ForwardedConnection>)> {
        let on_host = HostListener::Tcp {
            bind: bind.into(),
            port,
        };
        self.remote_streams(on_host).await
    }

    /// As [`forward_remote_socket`](Self::forward_remote_socket), but each connection to
    /// the host's socket is handed to the caller, as
    /// [`forward_remote_streams`](Self::forward_remote_streams) hands them.
    ///
    /// # Errors
    /// As [`forward_remote_socket`](Self::forward_remote_socket).
    pub async fn forward_remote_socket_streams(
        &self,
        path: impl Into<String>,
    ) -> Result<(RemoteForward, mpsc::Receiver<ForwardedConnection>)> {
        self.remote_streams(HostListener::UnixSocket(path.into()))
            .await
    }

    async fn remote_streams(
        &self,
        on_host: HostListener,
    ) -> Result<(RemoteForward, mpsc::Receiver<ForwardedConnection>)> {
        let (sender, receiver) = mpsc::channel(WAITING_STREAMS);
        let forward = self.remote(on_host, Deliver::Caller(sender)).await?;
        Ok((forward, receiver))
    }

    pub(super) async fn remote(
        &self,
        on_host: HostListener,
        deliver: Deliver,
    ) -> Result<RemoteForward> {
        let mut audit = self.audit("forward_remote")?;
        audit.note(|record| record.path = Some(on_host.to_string()));
        let result = self.remote_unaudited(on_host, deliver).await;
        if let Ok(forward) = &result {
            audit.note(|record| {
                let listener = record.path.take().unwrap_or_default();
                record.path = Some(format!("{listener} to {}", forward.description));
            });
        }
        audit.end_with(&result);
        result
    }

    /// [`remote`](Self::remote) without its audit record.
    async fn remote_unaudited(
        &self,
        on_host: HostListener,
        deliver: Deliver,
    ) -> Result<RemoteForward> {
        let link = Arc::new(Link::new(self.inner.clone()));
        let session = link.session().await?;
        let (incoming, streams) = mpsc::channel(WAITING_STREAMS);
        let allocated = request(&link, &session, &on_host, &incoming).await?;
        tracing::debug!(host = %self.host(), listener = %on_host, port = allocated,
            "remote forward listening");
        let description = match &deliver {
            Deliver::To(target) => format!("{target} from {}", self.host()),
            Deliver::Caller(_) => format!("the caller's streams from {}", self.host()),
        };
        let (port_tx, port_rx) = watch::channel(allocated);
        let counters = Arc::new(ForwardCounters::default());
        let task = ForwardTask::spawn(keep(Kept {
            link: link.clone(),
            session,
            on_host: on_host.clone(),
            port: port_tx,
            incoming,
            streams,
            deliver,
            counters: counters.clone(),
        }));
        Ok(RemoteForward {
            on_host,
            description,
            port: port_rx,
            counters,
            link,
            task,
        })
    }
}

fn local_target(local: SocketAddr) -> ForwardTarget {
    ForwardTarget::Tcp {
        host: local.ip().to_string(),
        port: local.port(),
    }
}

/// Asks `session` to listen on `on_host` and routes its channels to `incoming`. Returns the
/// port the host listens on (0 for a Unix socket).
async fn request(
    link: &Link,
    session: &Arc<Session>,
    on_host: &HostListener,
    incoming: &mpsc::Sender<ForwardedStream>,
) -> Result<u16> {
    let (host, port) = (&link.pool().config.host, link.pool().config.port);
    let Some(handle) = session.handle() else {
        return Err(Error::ConnectionLost {
            host: host.clone(),
            port,
        });
    };
    let refused = || Error::ForwardRefused {
        host: host.clone(),
        port,
        target: on_host.to_string(),
        refusal: ForwardRefusal::ListenRefused,
        reason: match on_host {
            HostListener::Tcp { .. } => {
                "the server refused to listen there (PermitListen, \
                AllowTcpForwarding, GatewayPorts, a port in use or privileged)"
            }
            HostListener::UnixSocket(_) => {
                "the server refused to listen there \
                (AllowStreamLocalForwarding, the path exists, its directory not writable, or \
                no Unix socket forwards in this server)"
            }
        }
        .to_owned(),
    };
    // Routed before the request: the server may open a channel as soon as it listens.
    let asked_port = match on_host {
        HostListener::Tcp { port, .. } => *port,
        HostListener::UnixSocket(_) => 0,
    };
    let route = on_host.route();
    if route != Listener::Port(0) {
        session.forwarded.add(route.clone(), incoming.clone());
    }
    let answer = tokio::time::timeout(link.pool().config.connect_timeout, async {
        match on_host {
            HostListener::Tcp { bind, port } => {
                handle.tcpip_forward(bind.as_str(), u32::from(*port)).await
            }
            HostListener::UnixSocket(path) => {
                handle.streamlocal_forward(path.as_str()).await.map(|()| 0)
            }
        }
    })
    .await;
    let failed = |error: Error| {
        session.forwarded.remove(&route);
        Err(error)
    };
    let allocated = match answer {
        Ok(Ok(0)) => asked_port,
        Ok(Ok(picked)) => u16::try_from(picked).map_err(|_| refused())?,
        Ok(Err(russh::Error::RequestDenied)) => return failed(refused()),
        Ok(Err(source)) => {
            return failed(Error::Ssh {
                host: host.clone(),
                port,
                phase: crate::error::Phase::ChannelOpen,
                source,
            });
        }
        Err(_) => {
            return failed(Error::Timeout {
                host: host.clone(),
                port,
                phase: crate::error::Phase::ChannelOpen,
                after: link.pool().config.connect_timeout,
            });
        }
    };
    if let HostListener::Tcp { .. } = on_host {
        session
            .forwarded
            .add(Listener::Port(u32::from(allocated)), incoming.clone());
    }
    Ok(allocated)
}

/// What a remote forward's task keeps.
struct Kept {
    link: Arc<Link>,
    session: Arc<Session>,
    /// Where the host listens, as asked for (port 0: the server's pick).
    on_host: HostListener,
    port: watch::Sender<u16>,
    incoming: mpsc::Sender<ForwardedStream>,
    streams: mpsc::Receiver<ForwardedStream>,
    deliver: Deliver,
    counters: Arc<ForwardCounters>,
}

/// A remote forward's task: serves its streams, and when its connection is lost, dials a
/// new one and asks for the port again (the same port first, even one the server picked,
/// so clients on the host keep their address; the server's pick again if that is taken).
async fn keep(mut kept: Kept) {
    let mut pumps = JoinSet::new();
    let mut watch = tokio::time::interval(WATCH_CONNECTION);
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            Some(stream) = kept.streams.recv() => {
                let open = OpenStream::new(kept.counters.clone(), kept.link.pool().clone());
                match &kept.deliver {
                    Deliver::To(target) => {
                        pumps.spawn(serve_locally(
                            stream,
                            target.clone(),
                            open,
                            kept.counters.clone(),
                        ));
                    }
                    Deliver::Caller(sender) => {
                        let connection = ForwardedConnection {
                            stream: stream.channel.into_stream(),
                            originator: stream.originator,
                            _open: open,
                        };
                        // A caller that dropped its receiver gets no more; the forward
                        // stays until it is closed or dropped.
                        sender.send(connection).await.ok();
                    }
                }
            }
            Some(_) = pumps.join_next(), if !pumps.is_empty() => {}
            _ = watch.tick() => {
                if (kept.session.is_dead() || kept.session.handle().is_none())
                    && !reconnect(&mut kept).await
                {
                    // The executor was closed: nothing will listen again.
                    return;
                }
            }
        }
    }
}

/// Dials until a new connection listens for the forward again (backing off from 100 ms to
/// 5 s between attempts). False when the executor was closed meanwhile.
async fn reconnect(kept: &mut Kept) -> bool {
    let lost = kept.session.clone();
    kept.link.forget(&lost).await;
    let mut pause = Duration::from_millis(100);
    loop {
        if kept.link.pool().is_closed() {
            return false;
        }
        if let Ok(session) = kept.link.session().await {
            let (link, incoming) = (&kept.link, &kept.incoming);
            let again = match &kept.on_host {
                HostListener::Tcp { bind, port: asked } => {
                    let previous = HostListener::Tcp {
                        bind: bind.clone(),
                        port: *kept.port.borrow(),
                    };
                    match request(link, &session, &previous, incoming).await {
                        Err(Error::ForwardRefused { .. }) if *asked == 0 => {
                            request(link, &session, &kept.on_host, incoming).await
                        }
                        other => other,
                    }
                }
                HostListener::UnixSocket(_) => {
                    request(link, &session, &kept.on_host, incoming).await
                }
            };
            match again {
                Ok(port) => {
                    tracing::debug!(listener = %kept.on_host, port, "remote forward listening again");
                    kept.session = session;
                    kept.port.send_replace(port);
                    return true;
                }
                Err(error) => {
                    tracing::debug!(listener = %kept.on_host, %error,
                        "remote forward: asking again failed");
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// One connection from the host, carried to `target` (connected from this machine).
async fn serve_locally(
    stream: ForwardedStream,
    target: ForwardTarget,
    open: OpenStream,
    counters: Arc<ForwardCounters>,
) {
    let refused = |error: std::io::Error| {
        tracing::debug!(%target, %error, "remote forward: local target refused");
        open.failed();
    };
    match &target {
        ForwardTarget::Tcp { host, port } => {
            match TcpStream::connect((host.as_str(), *port)).await {
                Ok(mut socket) => {
                    socket.set_nodelay(true).ok();
                    if let pipe::Ended::Broken(error) =
                        pipe::pump(&mut socket, stream.channel, &counters).await
                    {
                        tracing::debug!(%target, %error, "remote forward: stream broken");
                        open.failed();
                        socket.set_zero_linger().ok();
                    }
                }
                Err(error) => {
                    refused(error);
                    // The host's peer sees its connection end.
                    stream.channel.close().await.ok();
                }
            }
        }
        ForwardTarget::UnixSocket(path) => match UnixStream::connect(path).await {
            Ok(mut socket) => {
                if let pipe::Ended::Broken(error) =
                    pipe::pump(&mut socket, stream.channel, &counters).await
                {
                    tracing::debug!(%target, %error, "remote forward: stream broken");
                    open.failed();
                }
            }
            Err(error) => {
                refused(error);
                stream.channel.close().await.ok();
            }
        },
    }
}
