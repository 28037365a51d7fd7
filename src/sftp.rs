//! File commands over SFTP: one SFTP channel per pooled connection, reused.

use std::{path::Path, sync::Arc};

use russh_sftp::{
    client::{SftpSession, error::Error as SftpError},
    protocol::{OpenFlags, StatusCode},
};
use tokio::io::AsyncWriteExt;

use crate::{
    error::{Error, Result, SftpStatus},
    executor::SshExecutor,
    pool,
    session::Session,
};

fn path_text(path: &Path) -> Result<String> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| Error::InvalidInput {
            reason: format!(
                "path {} is not valid UTF-8, which SFTP cannot carry",
                path.display()
            ),
        })
}

fn status_of(error: &SftpError) -> Option<SftpStatus> {
    match error {
        SftpError::Status(status) => Some(match status.status_code {
            StatusCode::NoSuchFile => SftpStatus::NoSuchFile,
            StatusCode::PermissionDenied => SftpStatus::PermissionDenied,
            StatusCode::Failure => SftpStatus::Failure,
            _ => SftpStatus::Other,
        }),
        _ => None,
    }
}

impl SshExecutor {
    fn sftp_error(&self, operation: &'static str, path: &str, error: SftpError) -> Error {
        Error::Sftp {
            host: self.inner.config.host.clone(),
            operation,
            path: path.to_owned(),
            reason: match &error {
                SftpError::Status(status) if !status.error_message.is_empty() => {
                    status.error_message.clone()
                }
                other => other.to_string(),
            },
            status: status_of(&error),
        }
    }

    /// The SFTP client of the least-loaded live connection, opening one if needed.
    pub(crate) async fn sftp(&self) -> Result<Arc<SftpSession>> {
        let session = self.any_session().await?;
        let mut slot = session.sftp.lock().await;
        if let Some(sftp) = slot.as_ref() {
            return Ok(sftp.clone());
        }
        let config = &self.inner.config;
        let channel = pool::open_channel(&session, config, &self.inner.registry.counters).await?;
        channel
            .request_subsystem(true, "sftp")
            .await
            .map_err(|source| Error::Ssh {
                host: config.host.clone(),
                port: config.port,
                phase: crate::error::Phase::Sftp,
                source,
            })?;
        let sftp = SftpSession::new(channel.into_stream())
            .await
            .map_err(|e| self.sftp_error("start", "", e))?;
        let sftp = Arc::new(sftp);
        *slot = Some(sftp.clone());
        Ok(sftp)
    }

    async fn any_session(&self) -> Result<Arc<Session>> {
        let registry = &self.inner.registry;
        let pick = || {
            registry
                .sessions()
                .into_iter()
                .filter(|s| !s.is_dead())
                .min_by_key(|s| s.slots.load(std::sync::atomic::Ordering::Relaxed))
        };
        if let Some(session) = pick() {
            return Ok(session);
        }
        registry.dial_if_needed(0).await?;
        pick().ok_or_else(|| Error::ConnectionLost {
            host: self.inner.config.host.clone(),
            port: self.inner.config.port,
        })
    }

    /// Reads a whole remote file.
    ///
    /// # Errors
    /// [`Error::Sftp`] naming the path, or a connection error.
    pub async fn read_file_bytes(&self, path: &Path) -> Result<Vec<u8>> {
        let text = path_text(path)?;
        let sftp = self.sftp().await?;
        sftp.read(text.clone())
            .await
            .map_err(|e| self.sftp_error("read", &text, e))
    }

    /// Writes `content` to a remote file, creating missing parent directories, replacing
    /// existing content and keeping an existing file's permission bits.
    ///
    /// # Errors
    /// [`Error::Sftp`] naming the path, or a connection error.
    pub async fn write_file_bytes(&self, path: &Path, content: &[u8]) -> Result<()> {
        let text = path_text(path)?;
        let sftp = self.sftp().await?;
        if let Some(parent) = path
            .parent()
            .and_then(Path::to_str)
            .filter(|p| !p.is_empty())
        {
            create_dir_all(&sftp, parent).await;
        }
        let mut file = sftp
            .open_with_flags(
                text.clone(),
                OpenFlags::CREATE | OpenFlags::TRUNCATE | OpenFlags::WRITE,
            )
            .await
            .map_err(|e| self.sftp_error("open", &text, e))?;
        file.write_all(content)
            .await
            .map_err(|e| self.sftp_error("write", &text, SftpError::IO(e.to_string())))?;
        file.shutdown()
            .await
            .map_err(|e| self.sftp_error("close", &text, SftpError::IO(e.to_string())))?;
        Ok(())
    }
}

/// `mkdir -p` over SFTP; errors are ignored (the following open reports the real problem).
async fn create_dir_all(sftp: &SftpSession, dir: &str) {
    let mut prefix = String::new();
    for component in dir.split('/') {
        if component.is_empty() {
            if prefix.is_empty() {
                prefix.push('/');
            }
            continue;
        }
        if !prefix.is_empty() && !prefix.ends_with('/') {
            prefix.push('/');
        }
        prefix.push_str(component);
        if sftp.try_exists(prefix.clone()).await.unwrap_or(false) {
            continue;
        }
        let _ = sftp.create_dir(prefix.clone()).await;
    }
}
