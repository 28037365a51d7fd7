//! User authentication: key files, in-memory keys, ssh-agent and passwords.

use std::{fmt, path::PathBuf, sync::Arc};

use russh::{
    client::Handle,
    keys::{Certificate, PrivateKey, PrivateKeyWithHashAlg, agent::client::AgentClient},
};

use crate::{
    error::{Error, Result},
    host_key::ClientHandler,
};

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
    fn describe(&self) -> String {
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

async fn load_key_file(path: PathBuf, passphrase: Option<Secret>) -> Result<PrivateKey> {
    let shown = path.clone();
    // Reading the file and running the passphrase KDF (bcrypt, deliberately slow) must not
    // block the runtime.
    let loaded = tokio::task::spawn_blocking(move || {
        russh::keys::load_secret_key(&path, passphrase.as_ref().map(Secret::expose))
    })
    .await
    .map_err(|e| Error::KeyFile {
        path: shown.clone(),
        reason: format!("key loading task failed: {e}"),
    })?;
    loaded.map_err(|e| Error::KeyFile {
        path: shown,
        reason: match e {
            russh::keys::Error::KeyIsEncrypted => {
                "the key is encrypted and no passphrase was given".to_owned()
            }
            russh::keys::Error::IO(io) => io.to_string(),
            // ssh-key reports a wrong passphrase as a decryption/"crypto" failure.
            other => format!("{other} (wrong passphrase, or not an OpenSSH private key)"),
        },
    })
}

/// Reads an OpenSSH certificate and checks that it certifies `key` (the server would only
/// say "rejected").
async fn load_certificate(path: PathBuf, key: &PrivateKey) -> Result<Certificate> {
    let shown = path.clone();
    let loaded = tokio::task::spawn_blocking(move || russh::keys::load_openssh_certificate(&path))
        .await
        .map_err(|e| Error::KeyFile {
            path: shown.clone(),
            reason: format!("certificate loading task failed: {e}"),
        })?;
    let certificate = loaded.map_err(|e| Error::KeyFile {
        path: shown.clone(),
        reason: format!("{e} (not an OpenSSH certificate)"),
    })?;
    if certificate.public_key() != key.public_key().key_data() {
        return Err(Error::KeyFile {
            path: shown,
            reason: "the certificate is for a different key than the private key given with it"
                .to_owned(),
        });
    }
    Ok(certificate)
}

/// Context for error messages.
pub(crate) struct Target<'a> {
    pub(crate) user: &'a str,
    pub(crate) host: &'a str,
    pub(crate) port: u16,
}

impl Target<'_> {
    fn ssh_error(&self, source: russh::Error) -> Error {
        Error::Ssh {
            host: self.host.to_owned(),
            port: self.port,
            phase: crate::error::Phase::Auth,
            source,
        }
    }
}

/// Tries `methods` in order on a fresh handle. Rejections move on to the next method; a
/// method that cannot even be attempted (unreadable key, unreachable agent) fails at once
/// with its own typed error, because silently skipping it would hide a configuration mistake.
pub(crate) async fn authenticate(
    handle: &mut Handle<ClientHandler>,
    target: &Target<'_>,
    methods: &[AuthMethod],
) -> Result<()> {
    let mut tried = Vec::new();
    let mut remaining = String::from("unknown");
    for method in methods {
        tried.push(method.describe());
        let result = match method {
            AuthMethod::KeyFile { path, passphrase } => {
                let key = load_key_file(expand_home(path), passphrase.clone()).await?;
                publickey(handle, target, Arc::new(key)).await?
            }
            AuthMethod::Key(key) => publickey(handle, target, key.clone()).await?,
            AuthMethod::CertificateFile {
                key,
                passphrase,
                certificate,
            } => {
                let key = load_key_file(expand_home(key), passphrase.clone()).await?;
                let certificate = load_certificate(expand_home(certificate), &key).await?;
                handle
                    .authenticate_openssh_cert(target.user, Arc::new(key), certificate)
                    .await
                    .map_err(|e| target.ssh_error(e))?
            }
            AuthMethod::Password(password) => handle
                .authenticate_password(target.user, password.expose())
                .await
                .map_err(|e| target.ssh_error(e))?,
            AuthMethod::Agent { socket } => {
                match agent(handle, target, socket.as_ref(), methods.len() == 1).await? {
                    Some(result) => result,
                    None => continue,
                }
            }
        };
        match result {
            russh::client::AuthResult::Success => return Ok(()),
            russh::client::AuthResult::Failure {
                remaining_methods, ..
            } if remaining_methods.is_empty() => {
                // russh reports a connection that died mid-authentication as a failure with
                // no methods left (OpenSSH always lists the methods that may continue): that
                // is a transport problem, not a refusal.
                return Err(target.ssh_error(russh::Error::Disconnect));
            }
            russh::client::AuthResult::Failure {
                remaining_methods, ..
            } => {
                remaining = remaining_methods
                    .iter()
                    .map(<&str>::from)
                    .collect::<Vec<_>>()
                    .join(", ");
            }
        }
    }
    if methods.is_empty() {
        return Err(Error::Config {
            reason: "no authentication method configured".to_owned(),
        });
    }
    Err(Error::AuthRejected {
        user: target.user.to_owned(),
        host: target.host.to_owned(),
        port: target.port,
        tried: tried.join(", "),
        remaining,
    })
}

async fn publickey(
    handle: &mut Handle<ClientHandler>,
    target: &Target<'_>,
    key: Arc<PrivateKey>,
) -> Result<russh::client::AuthResult> {
    // RSA keys need the best SHA-2 variant the server accepts; other key types ignore it.
    let hash = handle
        .best_supported_rsa_hash()
        .await
        .map_err(|e| target.ssh_error(e))?
        .flatten();
    handle
        .authenticate_publickey(target.user, PrivateKeyWithHashAlg::new(key, hash))
        .await
        .map_err(|e| target.ssh_error(e))
}

/// Returns `None` when the agent has no identities and other methods remain to try.
async fn agent(
    handle: &mut Handle<ClientHandler>,
    target: &Target<'_>,
    socket: Option<&PathBuf>,
    only_method: bool,
) -> Result<Option<russh::client::AuthResult>> {
    let agent_error = |reason: String| Error::Agent { reason };
    let mut client = match socket {
        Some(path) => AgentClient::connect_uds(path).await,
        None => AgentClient::connect_env().await,
    }
    .map_err(|e| agent_error(format!("cannot connect: {e}")))?;
    let identities = client
        .request_identities()
        .await
        .map_err(|e| agent_error(format!("cannot list identities: {e}")))?;
    if identities.is_empty() {
        if only_method {
            return Err(agent_error("the agent holds no identities".to_owned()));
        }
        return Ok(None);
    }
    let hash = handle
        .best_supported_rsa_hash()
        .await
        .map_err(|e| target.ssh_error(e))?
        .flatten();
    let mut last = None;
    for identity in identities {
        let result = handle
            .authenticate_publickey_with(
                target.user,
                identity.public_key().into_owned(),
                hash,
                &mut client,
            )
            .await
            .map_err(|e| agent_error(format!("signing failed: {e}")))?;
        if result.success() {
            return Ok(Some(result));
        }
        last = Some(result);
    }
    Ok(last)
}
