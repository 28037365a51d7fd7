//! The floor: a raw russh client on one already-open, authenticated connection.
//!
//! Uses the same transport settings as the executor (AES-GCM first, 8 MiB window, TCP_NODELAY)
//! so that the difference to the executor is the pool, the driver task and the wrapper.

use std::{borrow::Cow, path::PathBuf, sync::Arc, time::Duration};

use anyhow::{Context, bail};
use russh::{
    ChannelMsg, cipher,
    client::{self, Handle},
    keys::{PrivateKeyWithHashAlg, PublicKeyOrCertificate, load_secret_key},
};

/// Where and as whom to connect.
#[derive(Debug, Clone)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub key: PathBuf,
    /// `ssh-ed25519 AAAA…`: the only host key accepted (pinned).
    pub host_key: String,
}

pub struct Pinned {
    expected: String,
}

impl client::Handler for Pinned {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let PublicKeyOrCertificate::PublicKey { key, .. } = key else {
            return Ok(false);
        };
        let wire = key.to_openssh().unwrap_or_default();
        let first_two = |s: &str| s.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
        Ok(first_two(&wire) == first_two(&self.expected))
    }
}

pub type RawHandle = Handle<Pinned>;

pub fn config() -> client::Config {
    client::Config {
        nodelay: true,
        keepalive_interval: None,
        inactivity_timeout: None,
        preferred: russh::Preferred {
            cipher: Cow::Borrowed(&[
                cipher::AES_256_GCM,
                cipher::AES_128_GCM,
                cipher::CHACHA20_POLY1305,
                cipher::AES_256_CTR,
            ]),
            ..Default::default()
        },
        window_size: 8 * 1024 * 1024,
        ..Default::default()
    }
}

/// Connects and authenticates. `nodelay = false` reproduces what the executor's
/// `session::dial` does today: it opens its own `TcpStream` and passes it to
/// `connect_stream`, which never applies `Config::nodelay`.
pub async fn connect(target: &Target, nodelay: bool) -> anyhow::Result<RawHandle> {
    let handler = Pinned {
        expected: target.host_key.clone(),
    };
    let stream = tokio::net::TcpStream::connect((target.host.as_str(), target.port)).await?;
    stream.set_nodelay(nodelay)?;
    let mut handle = client::connect_stream(Arc::new(config()), stream, handler)
        .await
        .context("ssh handshake")?;
    let key = load_secret_key(&target.key, None)?;
    let auth = handle
        .authenticate_publickey(
            target.user.clone(),
            PrivateKeyWithHashAlg::new(Arc::new(key), None),
        )
        .await?;
    if !auth.success() {
        bail!("public key authentication refused");
    }
    // A warm-up ping: pays sshd's post-authentication Nagle stall (up to 40 ms while our ACKs
    // are delayed; the executor avoids it with TCP_QUICKACK) here, not in a measured command.
    tokio::time::timeout(Duration::from_secs(5), handle.send_ping()).await??;
    Ok(handle)
}

/// The median of 20 keepalive pings on a new raw connection to `target`: the link's round
/// trip as SSH sees it (the proxy's delay included).
pub async fn median_ping_rtt(target: &Target) -> anyhow::Result<Duration> {
    let handle = connect(target, true).await?;
    let mut samples = Vec::new();
    for _ in 0..20 {
        let t = std::time::Instant::now();
        handle.send_ping().await?;
        samples.push(t.elapsed());
    }
    let _ = handle
        .disconnect(russh::Disconnect::ByApplication, "", "en")
        .await;
    Ok(crate::stats::Samples::new(samples).median())
}

/// open + exec + EOF + drain to CLOSE. Returns the exit status and the stdout byte count;
/// `on_data` sees each stdout packet's length.
pub async fn exec(
    handle: &RawHandle,
    command: &[u8],
    on_data: impl FnMut(usize),
) -> anyhow::Result<(Option<u32>, u64)> {
    exec_and_drain(handle, command, &[], true, on_data).await
}

/// Like [`exec`] for an [`executor_request`]: stdin stays open (the supervisor's control
/// line) until the server closes the channel, as the executor does.
pub async fn exec_supervised(
    handle: &RawHandle,
    command: &ExecutorRequest,
    on_data: impl FnMut(usize),
) -> anyhow::Result<(Option<u32>, u64)> {
    exec_and_drain(handle, &command.0, &command.1, false, on_data).await
}

async fn exec_and_drain(
    handle: &RawHandle,
    command: &[u8],
    stdin: &[u8],
    send_eof: bool,
    mut on_data: impl FnMut(usize),
) -> anyhow::Result<(Option<u32>, u64)> {
    let mut channel = handle.channel_open_session().await?;
    channel.exec(true, command).await?;
    if !stdin.is_empty() {
        channel.data(stdin).await?;
    }
    if send_eof {
        channel.eof().await?;
    }
    let mut status = None;
    let mut bytes = 0u64;
    while let Some(msg) = channel.wait().await {
        match msg {
            ChannelMsg::Data { data } => {
                bytes += data.len() as u64;
                on_data(data.len());
            }
            ChannelMsg::ExitStatus { exit_status } => status = Some(exit_status),
            ChannelMsg::Close => break,
            _ => {}
        }
    }
    Ok((status, bytes))
}

/// The exec request and the stdin payload that follows it.
pub type ExecutorRequest = (Vec<u8>, Vec<u8>);

/// The exact exec request and payload the executor sends for `sh -c <command>` with default
/// settings (`supervisor_kills_on_disconnect` is `kill_on_disconnect`), so the floor is
/// measured with the same remote work. Send it with [`exec_supervised`].
pub fn executor_request(
    command: &str,
    supervisor_kills_on_disconnect: bool,
) -> anyhow::Result<ExecutorRequest> {
    Ok(swiftide_ssh_executor::exec_request_for_benchmarks(
        command,
        supervisor_kills_on_disconnect,
    )?)
}

/// An SFTP session on its own channel of `handle`.
pub async fn sftp(handle: &RawHandle) -> anyhow::Result<russh_sftp::client::SftpSession> {
    let channel = handle.channel_open_session().await?;
    channel.request_subsystem(true, "sftp").await?;
    Ok(russh_sftp::client::SftpSession::new(channel.into_stream()).await?)
}

/// The minimal write: open (create, truncate) + write + close, 3 round trips for small files.
pub async fn sftp_write(
    sftp: &russh_sftp::client::SftpSession,
    path: &str,
    content: &[u8],
) -> anyhow::Result<()> {
    use russh_sftp::protocol::OpenFlags;
    use tokio::io::AsyncWriteExt;
    let mut file = sftp
        .open_with_flags(
            path,
            OpenFlags::CREATE | OpenFlags::TRUNCATE | OpenFlags::WRITE,
        )
        .await?;
    file.write_all(content).await?;
    file.shutdown().await?;
    Ok(())
}
