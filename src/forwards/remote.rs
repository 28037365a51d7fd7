//! Remote forwards (`ssh -R`): a listener on the host, asked for with `tcpip-forward`, whose
//! connections the server opens to us as `forwarded-tcpip` channels.

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
    net::TcpStream,
    sync::{mpsc, watch},
    task::JoinSet,
};

use super::{ForwardCounters, ForwardStats, ForwardTask, link::Link, pipe, pipe::OpenStream};
use crate::{
    error::{Error, ForwardRefusal, Result},
    executor::SshExecutor,
    pool::Session,
    ssh::ForwardedStream,
};

/// Connections accepted on the host and not yet taken by the forward's task.
const WAITING_STREAMS: usize = 256;
/// How often a remote forward looks whether its connection is still there.
const WATCH_CONNECTION: Duration = Duration::from_millis(200);

/// A remote forward (`ssh -R`): the host listens, and each connection to its port is
/// carried here, to a local address ([`SshExecutor::forward_remote`]) or to the caller
/// ([`SshExecutor::forward_remote_streams`]).
///
/// When its connection is lost (the server restarted), the forward dials again and asks for
/// the same port; [`remote_port`](Self::remote_port) changes only when that port was picked
/// by the server and is now taken. [`close`](Self::close) cancels the listener on the host
/// (`cancel-tcpip-forward`) and ends the streams in flight. **Dropping** it ends its task
/// (best effort, at the runtime's next turn) and with it the forward's connection, which
/// takes the host's listener along.
#[derive(Debug)]
pub struct RemoteForward {
    bind: String,
    port: watch::Receiver<u16>,
    counters: Arc<ForwardCounters>,
    link: Arc<Link>,
    task: ForwardTask,
}

impl RemoteForward {
    /// The port the host listens on (the one the server picked when 0 was asked for).
    pub fn remote_port(&self) -> u16 {
        *self.port.borrow()
    }

    /// The address the host listens on, as it was asked for.
    pub fn remote_bind(&self) -> &str {
        &self.bind
    }

    /// This forward's streams and bytes so far.
    pub fn stats(&self) -> ForwardStats {
        self.counters.snapshot()
    }

    /// Cancels the listener on the host and ends the streams in flight.
    pub async fn close(mut self) {
        self.task.stop().await;
        let port = u32::from(self.remote_port());
        if let Ok(session) = self.link.session().await {
            session.forwarded.remove(port);
            if let Some(handle) = session.handle() {
                handle
                    .cancel_tcpip_forward(self.bind.as_str(), port)
                    .await
                    .ok();
            }
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
    /// them.
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
enum Deliver {
    /// Each connected to this local address and pumped.
    Local(SocketAddr),
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
        self.remote(bind.into(), port, Deliver::Local(local)).await
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
        let (sender, receiver) = mpsc::channel(WAITING_STREAMS);
        let forward = self
            .remote(bind.into(), port, Deliver::Caller(sender))
            .await?;
        Ok((forward, receiver))
    }

    async fn remote(&self, bind: String, port: u16, deliver: Deliver) -> Result<RemoteForward> {
        let link = Arc::new(Link::new(self.inner.clone()));
        let session = link.session().await?;
        let (incoming, streams) = mpsc::channel(WAITING_STREAMS);
        let allocated = request(&link, &session, &bind, port, &incoming).await?;
        tracing::debug!(host = %self.host(), %bind, port = allocated, "remote forward listening");
        let (port_tx, port_rx) = watch::channel(allocated);
        let counters = Arc::new(ForwardCounters::default());
        let task = ForwardTask::spawn(keep(Kept {
            link: link.clone(),
            session,
            bind: bind.clone(),
            asked: port,
            port: port_tx,
            incoming,
            streams,
            deliver,
            counters: counters.clone(),
        }));
        Ok(RemoteForward {
            bind,
            port: port_rx,
            counters,
            link,
            task,
        })
    }
}

/// Asks `session` to listen on `bind:port` and routes its channels to `incoming`. Returns
/// the port the host listens on.
async fn request(
    link: &Link,
    session: &Arc<Session>,
    bind: &str,
    port: u16,
    incoming: &mpsc::Sender<ForwardedStream>,
) -> Result<u16> {
    let Some(handle) = session.handle() else {
        return Err(Error::ConnectionLost {
            host: link.pool().config.host.clone(),
            port: link.pool().config.port,
        });
    };
    let refused = || Error::ForwardRefused {
        host: link.pool().config.host.clone(),
        port: link.pool().config.port,
        target: if bind.contains(':') {
            format!("[{bind}]:{port}")
        } else {
            format!("{bind}:{port}")
        },
        refusal: ForwardRefusal::ListenRefused,
        reason: "the server refused to listen there (PermitListen, AllowTcpForwarding, \
                 GatewayPorts, a port in use or privileged)"
            .to_owned(),
    };
    // Routed before the request: the server may open a channel as soon as it listens.
    if port != 0 {
        session.forwarded.add(u32::from(port), incoming.clone());
    }
    let answer = tokio::time::timeout(
        link.pool().config.connect_timeout,
        handle.tcpip_forward(bind, u32::from(port)),
    )
    .await;
    let allocated = match answer {
        Ok(Ok(0)) => port,
        Ok(Ok(picked)) => u16::try_from(picked).map_err(|_| refused())?,
        Ok(Err(russh::Error::RequestDenied)) => {
            session.forwarded.remove(u32::from(port));
            return Err(refused());
        }
        Ok(Err(source)) => {
            session.forwarded.remove(u32::from(port));
            return Err(Error::Ssh {
                host: link.pool().config.host.clone(),
                port: link.pool().config.port,
                phase: crate::error::Phase::ChannelOpen,
                source,
            });
        }
        Err(_) => {
            session.forwarded.remove(u32::from(port));
            return Err(Error::Timeout {
                host: link.pool().config.host.clone(),
                port: link.pool().config.port,
                phase: crate::error::Phase::ChannelOpen,
                after: link.pool().config.connect_timeout,
            });
        }
    };
    session
        .forwarded
        .add(u32::from(allocated), incoming.clone());
    Ok(allocated)
}

/// What a remote forward's task keeps.
struct Kept {
    link: Arc<Link>,
    session: Arc<Session>,
    bind: String,
    /// The port asked for (0: the server's pick).
    asked: u16,
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
                    Deliver::Local(local) => {
                        pumps.spawn(serve_locally(stream, *local, open, kept.counters.clone()));
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
            let previous = *kept.port.borrow();
            let again = request(&kept.link, &session, &kept.bind, previous, &kept.incoming).await;
            let again = match again {
                Err(Error::ForwardRefused { .. }) if kept.asked == 0 => {
                    request(&kept.link, &session, &kept.bind, 0, &kept.incoming).await
                }
                other => other,
            };
            match again {
                Ok(port) => {
                    tracing::debug!(bind = %kept.bind, port, "remote forward listening again");
                    kept.session = session;
                    kept.port.send_replace(port);
                    return true;
                }
                Err(error) => {
                    tracing::debug!(bind = %kept.bind, %error, "remote forward: asking again failed");
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// One connection from the host, carried to `local`.
async fn serve_locally(
    stream: ForwardedStream,
    local: SocketAddr,
    open: OpenStream,
    counters: Arc<ForwardCounters>,
) {
    let mut socket = match TcpStream::connect(local).await {
        Ok(socket) => socket,
        Err(error) => {
            tracing::debug!(%local, %error, "remote forward: local target refused");
            open.failed();
            // The host's peer sees its connection end.
            stream.channel.close().await.ok();
            return;
        }
    };
    socket.set_nodelay(true).ok();
    if let pipe::Ended::Broken(error) = pipe::pump(&mut socket, stream.channel, &counters).await {
        tracing::debug!(%local, %error, "remote forward: stream broken");
        open.failed();
        socket.set_zero_linger().ok();
    }
}
