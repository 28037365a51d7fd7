//! The russh client handler that enforces the [`HostKeyPolicy`] during the handshake.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use russh::keys::{PublicKey, PublicKeyOrCertificate};

use crate::{
    config::{HostKeyPolicy, expand_home},
    error::Error,
    ssh::{
        forwarded::{ForwardedStream, Listener, SharedRoutes},
        known_hosts::{self, KnownHosts, Verdict},
    },
};

#[cfg(doc)]
use crate::ssh::forwarded::ForwardedRoutes;

/// The error type of [`ClientHandler`]: russh's own errors, or our host-key verdict.
#[derive(Debug)]
pub(crate) enum HandlerError {
    Ssh(russh::Error),
    HostKey(Error),
}

impl From<russh::Error> for HandlerError {
    fn from(e: russh::Error) -> Self {
        HandlerError::Ssh(e)
    }
}

/// Per-connection handler: verifies the host key and records when the connection ends.
pub(crate) struct ClientHandler {
    pub(crate) policy: HostKeyPolicy,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Set when russh reports the session gone; read by the pool without I/O.
    pub(crate) closed: Arc<AtomicBool>,
    /// The remote forwards requested on this connection (see [`ForwardedRoutes`]).
    pub(crate) forwarded: SharedRoutes,
}

impl ClientHandler {
    async fn verify(&self, key: &PublicKey) -> Result<(), Error> {
        let fingerprint = known_hosts::fingerprint(key);
        let files = match &self.policy {
            HostKeyPolicy::InsecureAcceptAnyHostKey => {
                tracing::warn!(
                    host = %self.host, port = self.port, %fingerprint,
                    "accepting host key WITHOUT verification (InsecureAcceptAnyHostKey)"
                );
                return Ok(());
            }
            HostKeyPolicy::Strict { known_hosts } | HostKeyPolicy::AcceptNew { known_hosts } => {
                known_hosts
                    .iter()
                    .map(|p| expand_home(p))
                    .collect::<Vec<_>>()
            }
        };
        let (verdict, file) = {
            let (to_read, host, port, presented) =
                (files.clone(), self.host.clone(), self.port, key.clone());
            tokio::task::spawn_blocking(move || {
                KnownHosts::check_cached(&to_read, &host, port, &presented)
                    .map_err(|(path, source)| Error::KnownHosts { path, source })
            })
            .await
            .map_err(|e| Error::KnownHosts {
                path: files.first().cloned().unwrap_or_default(),
                source: std::io::Error::other(e.to_string()),
            })??
        };
        let file = file.map(|p| p.display().to_string()).unwrap_or_default();
        match verdict {
            Verdict::Trusted => Ok(()),
            Verdict::Revoked { line } => Err(Error::HostKeyRevoked {
                host: self.host.clone(),
                port: self.port,
                fingerprint,
                file,
                line,
            }),
            Verdict::UnreadableRevocation { line } => Err(Error::UnreadableRevocation {
                host: self.host.clone(),
                port: self.port,
                fingerprint,
                file,
                line,
            }),
            Verdict::Changed { line } => Err(Error::HostKeyMismatch {
                host: self.host.clone(),
                port: self.port,
                fingerprint,
                file,
                line,
            }),
            Verdict::Unknown => match (&self.policy, files.first()) {
                (HostKeyPolicy::AcceptNew { .. }, Some(first)) => {
                    let (first, host, port, key) =
                        (first.clone(), self.host.clone(), self.port, key.clone());
                    let appended = tokio::task::spawn_blocking(move || {
                        known_hosts::append(&first, &host, port, &key).map_err(|source| {
                            Error::KnownHosts {
                                path: first.clone(),
                                source,
                            }
                        })
                    })
                    .await
                    .map_err(|e| Error::KnownHosts {
                        path: files.first().cloned().unwrap_or_default(),
                        source: std::io::Error::other(e.to_string()),
                    })?;
                    appended?;
                    tracing::info!(host = %self.host, port = self.port, %fingerprint,
                        "recorded new host key (accept-new)");
                    Ok(())
                }
                _ => Err(Error::UnknownHostKey {
                    host: self.host.clone(),
                    port: self.port,
                    fingerprint,
                    files: files
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                }),
            },
        }
    }

    /// Hands a channel the server opened for a remote forward to that forward, or refuses it
    /// when no forward of this connection listens there (any more).
    async fn hand_over(
        &self,
        listener: Listener,
        channel: russh::Channel<russh::client::Msg>,
        originator: (String, u32),
        reply: russh::client::ChannelOpenHandle,
    ) {
        let Some(route) = self.forwarded.route(&listener) else {
            tracing::debug!(host = %self.host, ?listener,
                "refused a forwarded connection: no forward listens there");
            drop(reply);
            return;
        };
        // A forward that does not take its streams fast enough has them refused rather than
        // queued without bound (the peer on the host sees its connection closed).
        let Ok(permit) = route.try_reserve() else {
            tracing::debug!(host = %self.host, ?listener,
                "refused a forwarded connection: its forward is closed or has too many waiting");
            drop(reply);
            return;
        };
        reply.accept().await;
        permit.send(ForwardedStream {
            channel,
            originator,
        });
    }
}

impl russh::client::Handler for ClientHandler {
    type Error = HandlerError;

    async fn check_server_key(
        &mut self,
        server_public_key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        match server_public_key {
            PublicKeyOrCertificate::PublicKey { key, .. } => {
                self.verify(key).await.map_err(HandlerError::HostKey)?;
                Ok(true)
            }
            // Host certificates are not negotiated (russh leaves them off by default), so
            // one arriving here is unexpected: refuse rather than skip the CA check.
            PublicKeyOrCertificate::Certificate(_) => Err(HandlerError::HostKey(Error::Config {
                reason:
                    "the server offered a host certificate; host certificates are not supported"
                        .to_owned(),
            })),
        }
    }

    /// A connection on a remote forward's TCP listener: handed to that forward, or refused
    /// when no forward of this connection listens on `connected_port` (any more).
    async fn server_channel_open_forwarded_tcpip(
        &mut self,
        channel: russh::Channel<russh::client::Msg>,
        _connected_address: &str,
        connected_port: u32,
        originator_address: &str,
        originator_port: u32,
        reply: russh::client::ChannelOpenHandle,
        _session: &mut russh::client::Session,
    ) -> Result<(), Self::Error> {
        let originator = (originator_address.to_owned(), originator_port);
        self.hand_over(Listener::Port(connected_port), channel, originator, reply)
            .await;
        Ok(())
    }

    /// A connection on a remote forward's Unix socket on the host, as for TCP. The server
    /// names no originator for these (the peer is a local process on the host).
    async fn server_channel_open_forwarded_streamlocal(
        &mut self,
        channel: russh::Channel<russh::client::Msg>,
        socket_path: &str,
        reply: russh::client::ChannelOpenHandle,
        _session: &mut russh::client::Session,
    ) -> Result<(), Self::Error> {
        let listener = Listener::Socket(socket_path.to_owned());
        self.hand_over(listener, channel, (String::new(), 0), reply)
            .await;
        Ok(())
    }

    async fn disconnected(
        &mut self,
        reason: russh::client::DisconnectReason<Self::Error>,
    ) -> Result<(), Self::Error> {
        self.closed.store(true, Ordering::Release);
        match reason {
            russh::client::DisconnectReason::ReceivedDisconnect(info) => {
                tracing::debug!(host = %self.host, port = self.port, ?info, "server disconnected");
                Ok(())
            }
            russh::client::DisconnectReason::Error(e) => {
                tracing::debug!(host = %self.host, port = self.port, error = ?e, "connection ended");
                Err(e)
            }
        }
    }
}
