//! User authentication: key files, in-memory keys, certificates, ssh-agent and passwords,
//! tried in order on one handle.

use std::{path::PathBuf, sync::Arc};

use russh::{
    client::Handle,
    keys::{Certificate, PrivateKey, PrivateKeyWithHashAlg, agent::client::AgentClient},
};

use crate::{
    config::{AuthMethod, Secret, expand_home},
    error::{Error, Result},
    ssh::host_key::ClientHandler,
};

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
