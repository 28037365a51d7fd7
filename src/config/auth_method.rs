//! How to authenticate: the [`AuthMethod`]s a builder collects and the [`Secret`]s they hold.
//!
//! Only data lives here; `ssh::auth` loads keys and talks to the server.

use std::{fmt, path::PathBuf, sync::Arc};

use russh::keys::PrivateKey;

/// A secret string (passphrase or password) that never shows in `Debug` output.
#[derive(Clone)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(Arc::from(value.into()))
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl<T: Into<String>> From<T> for Secret {
    fn from(value: T) -> Self {
        Secret::new(value)
    }
}

/// One way of authenticating. The builder keeps a list and tries them in order until one
/// succeeds.
#[derive(Clone)]
#[non_exhaustive]
pub enum AuthMethod {
    /// An OpenSSH private key file, optionally encrypted with a passphrase.
    KeyFile {
        /// Path of the private key (a leading `~/` is expanded).
        path: PathBuf,
        /// Passphrase for an encrypted key.
        passphrase: Option<Secret>,
    },
    /// A private key already in memory.
    Key(Arc<PrivateKey>),
    /// An OpenSSH user certificate (`ssh-keygen -s`) with its private key: the server trusts
    /// the certificate's CA (`TrustedUserCAKeys`) instead of listing the key itself.
    CertificateFile {
        /// Path of the private key (a leading `~/` is expanded).
        key: PathBuf,
        /// Passphrase for an encrypted key.
        passphrase: Option<Secret>,
        /// Path of the certificate, usually `<key>-cert.pub`.
        certificate: PathBuf,
    },
    /// The identities of an ssh-agent, tried in the agent's order.
    Agent {
        /// The agent's socket; `None` means `$SSH_AUTH_SOCK`.
        socket: Option<PathBuf>,
    },
    /// A password.
    Password(Secret),
}

impl fmt::Debug for AuthMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthMethod::KeyFile { path, passphrase } => f
                .debug_struct("KeyFile")
                .field("path", path)
                .field("passphrase", &passphrase.as_ref().map(|_| "***"))
                .finish(),
            AuthMethod::Key(key) => f
                .debug_tuple("Key")
                .field(&key.algorithm().as_str())
                .finish(),
            AuthMethod::CertificateFile {
                key,
                passphrase,
                certificate,
            } => f
                .debug_struct("CertificateFile")
                .field("key", key)
                .field("passphrase", &passphrase.as_ref().map(|_| "***"))
                .field("certificate", certificate)
                .finish(),
            AuthMethod::Agent { socket } => {
                f.debug_struct("Agent").field("socket", socket).finish()
            }
            AuthMethod::Password(_) => f.write_str("Password(***)"),
        }
    }
}

impl AuthMethod {
    /// How error messages name this method.
    pub(crate) fn describe(&self) -> String {
        match self {
            AuthMethod::KeyFile { path, .. } => format!("publickey ({})", path.display()),
            AuthMethod::Key(key) => format!("publickey (in-memory {})", key.algorithm().as_str()),
            AuthMethod::CertificateFile { certificate, .. } => {
                format!("certificate ({})", certificate.display())
            }
            AuthMethod::Agent { socket: Some(s) } => format!("agent ({})", s.display()),
            AuthMethod::Agent { socket: None } => "agent ($SSH_AUTH_SOCK)".to_owned(),
            AuthMethod::Password(_) => "password".to_owned(),
        }
    }
}

/// Expands a leading `~/` with `$HOME`.
pub(crate) fn expand_home(path: &std::path::Path) -> PathBuf {
    if let Ok(rest) = path.strip_prefix("~")
        && let Some(home) = std::env::var_os("HOME")
    {
        return PathBuf::from(home).join(rest);
    }
    path.to_path_buf()
}
