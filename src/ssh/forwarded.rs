//! Where the server's `forwarded-tcpip` and `forwarded-streamlocal@openssh.com` channels go:
//! each connection keeps the remote forwards (`tcpip-forward` and `streamlocal-forward`,
//! `ssh -R`) requested on it, and the handler hands every channel the server opens for one of
//! them to that forward's receiver.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use russh::{Channel, client::Msg};
use tokio::sync::mpsc;

/// A connection the server accepted on a remote forward's listener, as a channel.
#[derive(Debug)]
pub(crate) struct ForwardedStream {
    pub(crate) channel: Channel<Msg>,
    /// The address and port of the peer that connected on the host.
    pub(crate) originator: (String, u32),
}

/// What a remote forward listens on, on the host: the key of its channels' route.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Listener {
    /// A TCP port (`tcpip-forward`).
    Port(u32),
    /// A Unix socket's path (`streamlocal-forward@openssh.com`).
    Socket(String),
}

/// The remote forwards requested on one connection, by the port or socket the server listens
/// on.
///
/// A TCP forward is keyed by its port only: OpenSSH reports the listen address of a `forwarded-tcpip` channel as the
/// request spelled it (`localhost`, `127.0.0.1`, `""`), and one connection cannot hold two
/// forwards of the same port on the host anyway (the second request is refused).
#[derive(Debug, Default)]
pub(crate) struct ForwardedRoutes {
    routes: Mutex<HashMap<Listener, mpsc::Sender<ForwardedStream>>>,
}

impl ForwardedRoutes {
    /// From now on, channels for `listener` go to `sender`.
    pub(crate) fn add(&self, listener: Listener, sender: mpsc::Sender<ForwardedStream>) {
        self.lock().insert(listener, sender);
    }

    /// Channels for `listener` are refused from now on.
    pub(crate) fn remove(&self, listener: &Listener) {
        self.lock().remove(listener);
    }

    /// The receiver of channels for `listener`, if its forward still wants them.
    pub(crate) fn route(&self, listener: &Listener) -> Option<mpsc::Sender<ForwardedStream>> {
        let mut routes = self.lock();
        match routes.get(listener) {
            Some(sender) if !sender.is_closed() => Some(sender.clone()),
            Some(_) => {
                routes.remove(listener);
                None
            }
            None => None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Listener, mpsc::Sender<ForwardedStream>>> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Shared between a connection's handler and whoever requests forwards on it.
pub(crate) type SharedRoutes = Arc<ForwardedRoutes>;
