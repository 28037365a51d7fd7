//! Where the server's `forwarded-tcpip` channels go: each connection keeps the remote forwards
//! (`tcpip-forward`, `ssh -R`) requested on it, and the handler hands every channel the server
//! opens for one of them to that forward's receiver.

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

/// The remote forwards requested on one connection, by the port the server listens on.
///
/// Keyed by port only: OpenSSH reports the listen address of a `forwarded-tcpip` channel as the
/// request spelled it (`localhost`, `127.0.0.1`, `""`), and one connection cannot hold two
/// forwards of the same port on the host anyway (the second request is refused).
#[derive(Debug, Default)]
pub(crate) struct ForwardedRoutes {
    routes: Mutex<HashMap<u32, mpsc::Sender<ForwardedStream>>>,
}

impl ForwardedRoutes {
    /// From now on, channels for `port` go to `sender`.
    pub(crate) fn add(&self, port: u32, sender: mpsc::Sender<ForwardedStream>) {
        self.lock().insert(port, sender);
    }

    /// Channels for `port` are refused from now on.
    pub(crate) fn remove(&self, port: u32) {
        self.lock().remove(&port);
    }

    /// The receiver of channels for `port`, if its forward still wants them.
    pub(crate) fn route(&self, port: u32) -> Option<mpsc::Sender<ForwardedStream>> {
        let mut routes = self.lock();
        match routes.get(&port) {
            Some(sender) if !sender.is_closed() => Some(sender.clone()),
            Some(_) => {
                routes.remove(&port);
                None
            }
            None => None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, mpsc::Sender<ForwardedStream>>> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Shared between a connection's handler and whoever requests forwards on it.
pub(crate) type SharedRoutes = Arc<ForwardedRoutes>;
