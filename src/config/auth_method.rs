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

    /// The secret on the first line of `path` (its `\n` or `\r\n` stripped), for passwords
    /// kept in files (a bot's become password, say). Refused, as ssh refuses such private
    /// keys, when group or others may read or write the file.
    ///
    /// # Errors
    /// [`Error::LocalFile`](crate::Error::LocalFile) when it cannot be read;
    /// [`Error::Config`](crate::Error::Config) when its permissions are too open or its first
    /// line is empty (the messages name the file, never its content).
    pub fn from_file(path: &std::path::Path) -> crate::error::Result<Self> {
        let cannot = |source| crate::error::Error::LocalFile {
            operation: "read",
            path: path.to_path_buf(),
            source,
        };
        let metadata = std::fs::metadata(path).map_err(cannot)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = metadata.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                return Err(crate::error::Error::Config {
                    reason: format!(
                        "{}: permissions {mode:04o} are too open for a secret (group or others \
                         may read or write it); `chmod 600 {}`",
                        path.display(),
                        path.display()
                    ),
                });
            }
        }
        #[cfg(not(unix))]
        let _ = metadata;
        let text = std::fs::read_to_string(path).map_err(cannot)?;
        let line = text.split('\n').next().unwrap_or_default();
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            return Err(crate::error::Error::Config {
                reason: format!("{}: the first line is empty", path.display()),
            });
        }
        Ok(Secret::new(line))
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

#[cfg(test)]
mod tests {
    use super::Secret;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_secret_file_gives_its_first_line_and_must_be_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("password");
        std::fs::write(&path, "hunter2\r\nsecond line\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(Secret::from_file(&path).unwrap().expose(), "hunter2");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let error = Secret::from_file(&path).unwrap_err().to_string();
        assert!(
            error.contains("0640") && !error.contains("hunter2"),
            "{error}"
        );
        std::fs::write(&path, "\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(Secret::from_file(&path).is_err());
        assert!(Secret::from_file(&dir.path().join("missing")).is_err());
    }
}
