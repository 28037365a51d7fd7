//! How the server's host key is verified: [`HostKeyPolicy`].
//!
//! The policy is data; `ssh::host_key` enforces it during the handshake.

use std::path::PathBuf;

/// How the server's host key is verified. Every variant except
/// [`InsecureAcceptAnyHostKey`](HostKeyPolicy::InsecureAcceptAnyHostKey) refuses a key that
/// differs from the one on record, before any credential or command is sent.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum HostKeyPolicy {
    /// Accept only keys listed in these known_hosts files (OpenSSH
    /// `StrictHostKeyChecking yes`). Missing files count as empty; a file that exists but
    /// cannot be read fails the connection.
    Strict {
        /// The known_hosts files, consulted together.
        known_hosts: Vec<PathBuf>,
    },
    /// Like `Strict`, but a host with no entry at all has its key appended to the first file
    /// (OpenSSH `StrictHostKeyChecking accept-new`). A changed key is still refused.
    AcceptNew {
        /// The known_hosts files; new keys go to the first.
        known_hosts: Vec<PathBuf>,
    },
    /// Accept any host key. Only for throwaway test machines: anyone on the network path can
    /// impersonate the server and read everything, passwords included. Each connection logs a
    /// warning.
    InsecureAcceptAnyHostKey,
}

impl Default for HostKeyPolicy {
    /// `Strict` with `~/.ssh/known_hosts` and `/etc/ssh/ssh_known_hosts`.
    fn default() -> Self {
        HostKeyPolicy::Strict {
            known_hosts: vec![
                PathBuf::from("~/.ssh/known_hosts"),
                PathBuf::from("/etc/ssh/ssh_known_hosts"),
            ],
        }
    }
}
