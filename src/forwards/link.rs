//! A forward's connection: dialed on first use with the executor's settings (jump hosts,
//! auth, host keys, retries), kept while it lives, and dialed anew by the first stream that
//! finds it gone.

use std::sync::Arc;

use russh::{Channel, ChannelOpenFailure, client::Msg};

use crate::{
    error::{Error, ForwardRefusal, Phase, Result},
    pool::{Pool, Session},
    ssh::describe_open_failure,
};

/// The connection one forward's streams share.
///
/// A forward's streams never ride on the connections of the executor's commands: russh
/// hands a channel's data to its reader through a bounded queue and blocks the whole
/// connection while one reader is behind, so a local client that stops reading would
/// freeze every command on the same connection. On a connection of its own it holds back
/// only the streams of its own forward, and only after that stream's own buffers are full.
#[derive(Debug)]
pub(crate) struct Link {
    pool: Arc<Pool>,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
}

impl Link {
    pub(crate) fn new(pool: Arc<Pool>) -> Self {
        Self {
            pool,
            session: tokio::sync::Mutex::new(None),
        }
    }

    pub(crate) fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// The live connection, dialed when there is none (or it was lost).
    pub(crate) async fn session(&self) -> Result<Arc<Session>> {
        if self.pool.is_closed() {
            return Err(Error::Closed);
        }
        let mut held = self.session.lock().await;
        if let Some(session) = held.as_ref()
            && !session.is_dead()
            && session.handle().is_some()
        {
            return Ok(session.clone());
        }
        let session = self.pool.registry.dial_detached().await?;
        *held = Some(session.clone());
        Ok(session)
    }

    /// Lets go of `lost` (its connection failed a request) so that the next call dials.
    pub(crate) async fn forget(&self, lost: &Arc<Session>) {
        let mut held = self.session.lock().await;
        if held.as_ref().is_some_and(|held| Arc::ptr_eq(held, lost)) {
            held.take();
        }
        drop(held);
        lost.retire();
        lost.disconnect().await;
    }

    /// Opens a channel to `target` on the host (`direct-tcpip` or
    /// `direct-streamlocal@openssh.com`), dialing a new connection once if the current one
    /// turns out to be lost. A refusal by the server is [`Error::ForwardRefused`] at once.
    pub(crate) async fn open(
        &self,
        target: &super::ForwardTarget,
        originator: (&str, u32),
    ) -> Result<Channel<Msg>> {
        let mut tries = 0;
        loop {
            tries += 1;
            let session = self.session().await?;
            let Some(handle) = session.handle() else {
                self.forget(&session).await;
                continue;
            };
            let opened = tokio::time::timeout(self.pool.config.connect_timeout, async {
                match target {
                    super::ForwardTarget::Tcp { host, port } => {
                        handle
                            .channel_open_direct_tcpip(
                                host.as_str(),
                                u32::from(*port),
                                originator.0,
                                originator.1,
                            )
                            .await
                    }
                    super::ForwardTarget::UnixSocket(path) => {
                        handle
                            .channel_open_direct_streamlocal(path.to_string_lossy())
                            .await
                    }
                }
            })
            .await;
            match opened {
                Ok(Ok(channel)) => return Ok(channel),
                Ok(Err(russh::Error::ChannelOpenFailure(reason))) => {
                    return Err(self.refused(target.to_string(), &reason));
                }
                // Any other answer from russh means the connection is gone (the server
                // restarted, the network dropped): one new connection, then the error.
                Ok(Err(source)) => {
                    self.forget(&session).await;
                    if tries >= 2 {
                        return Err(Error::Ssh {
                            host: self.pool.config.host.clone(),
                            port: self.pool.config.port,
                            phase: Phase::ChannelOpen,
                            source,
                        });
                    }
                }
                // No answer yet: the host may still be connecting to a slow target (sshd
                // answers a direct-tcpip open once its connect ends). This stream gives up;
                // the connection, and the other streams on it, stay.
                Err(_) => {
                    return Err(Error::Timeout {
                        host: self.pool.config.host.clone(),
                        port: self.pool.config.port,
                        phase: Phase::ChannelOpen,
                        after: self.pool.config.connect_timeout,
                    });
                }
            }
        }
    }

    pub(crate) fn refused(&self, target: String, reason: &ChannelOpenFailure) -> Error {
        let refusal = match reason {
            ChannelOpenFailure::AdministrativelyProhibited => ForwardRefusal::Prohibited,
            ChannelOpenFailure::ConnectFailed => ForwardRefusal::ConnectFailed,
            ChannelOpenFailure::UnknownChannelType => ForwardRefusal::Unsupported,
            ChannelOpenFailure::ResourceShortage => ForwardRefusal::ResourceShortage,
            ChannelOpenFailure::Other { .. } => ForwardRefusal::Other,
        };
        Error::ForwardRefused {
            host: self.pool.config.host.clone(),
            port: self.pool.config.port,
            target,
            refusal,
            reason: describe_open_failure(reason),
        }
    }
}
