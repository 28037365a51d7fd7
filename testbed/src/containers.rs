//! The Docker images as [`testcontainers`] images: [`SshImage`] and [`SshConnection`].
//!
//! For tests that already start their containers with `testcontainers` (its async API,
//! `AsyncRunner`, on tokio). The image is the same as [`DockerTestbed`](crate::DockerTestbed)'s
//! and gets its keys the same way: a fresh host key and the process-wide client keys,
//! copied to `/keys` before the container starts, where both entrypoints install them.
//! What the test connects with ([`SshConnection`]: host, mapped port, user, key,
//! `known_hosts`) is read from the running container.

use std::fmt;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;

use testcontainers::bollard::models::{HostConfig, PortBinding};
use testcontainers::core::{ContainerPort, WaitFor};
use testcontainers::{ContainerAsync, ContainerRequest, CopyToContainer, Image, ImageExt};

use crate::docker::{AUTHORIZED_KEYS_FILE, ContainerKeys, HOST_KEY_FILE};
use crate::{DOCKER_USER, DockerImage, TestbedError};

/// The port both servers listen on inside the container.
const SSH_PORT: ContainerPort = ContainerPort::Tcp(22);

/// A testbed server image for `testcontainers`: OpenSSH on Debian or Dropbear on BusyBox
/// ([`DockerImage`]), logging in as [`DOCKER_USER`] (or another of the image's
/// [`users`](DockerImage::users), see [`user`](Self::user)) with a fresh host key and the
/// process-wide client keys.
///
/// By default it names the image this crate builds, `swiftide-ssh-testbed-<name>:<hash>`
/// ([`DockerImage::tag`]: the hash covers the build context shipped in this crate, so the
/// tag always matches these files); build it first with [`ensure_built`](Self::ensure_built)
/// or `docker/prepare.sh` ([`prepare_script`](crate::prepare_script)). An image pushed to a
/// registry is named with [`named`](Self::named), and `testcontainers` pulls it as usual.
///
/// The container is ready when the server listens: OpenSSH's `Server listening on`, or,
/// for Dropbear (which logs nothing then), the entrypoint's `testbed: listening on port 22`
/// once the kernel lists the listening socket. Arguments for the server (`-o
/// MaxSessions=1` for sshd, `-j` for dropbear) go through [`ImageExt::with_cmd`].
///
/// ```no_run
/// use swiftide_ssh_testbed::{SshConnection, SshImage};
/// use testcontainers::runners::AsyncRunner;
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let image = SshImage::openssh()?; // or SshImage::dropbear()?
/// image.ensure_built().await?; // builds it with prepare.sh when missing
/// let container = image.on_loopback().start().await?; // published on 127.0.0.1 only
/// let ssh = SshConnection::of(&container).await?;
/// // ssh.host(), ssh.port(), ssh.user(), ssh.private_key_path(), ssh.known_hosts_path()
/// # Ok(())
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "testcontainers")))]
pub struct SshImage {
    image: DockerImage,
    name: String,
    tag: String,
    loopback: bool,
    ready: &'static str,
    copies: Vec<CopyToContainer>,
    keys: Arc<Keys>,
    user: String,
}

/// The keys and their directory, which lives as long as the image (and so as long as the
/// container, which owns its image).
struct Keys {
    keys: ContainerKeys,
    _dir: tempfile::TempDir,
}

impl fmt::Debug for SshImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshImage")
            .field("image", &self.image)
            .field("name", &self.name)
            .field("tag", &self.tag)
            .field("loopback", &self.loopback)
            .field("user", &self.user)
            .field("dir", &self.keys._dir.path())
            .finish_non_exhaustive()
    }
}

impl SshImage {
    /// The OpenSSH image ([`DockerImage::OpenSsh`]).
    ///
    /// # Errors
    ///
    /// As for [`new`](Self::new).
    pub fn openssh() -> Result<Self, TestbedError> {
        Self::new(DockerImage::OpenSsh)
    }

    /// The Dropbear/BusyBox image ([`DockerImage::DropbearBusybox`]).
    ///
    /// # Errors
    ///
    /// As for [`new`](Self::new).
    pub fn dropbear() -> Result<Self, TestbedError> {
        Self::new(DockerImage::DropbearBusybox)
    }

    /// The image `image`, with a fresh host key in a new private directory. Blocks for a
    /// few milliseconds (`ssh-keygen`, and `prepare.sh tag` once per process); the first
    /// call in a process also generates the client keys (a fraction of a second).
    ///
    /// # Errors
    ///
    /// [`TestbedError::Io`] or [`TestbedError::Command`] if the keys cannot be generated
    /// or the tag cannot be computed (`bash` and `ssh-keygen` are needed).
    pub fn new(image: DockerImage) -> Result<Self, TestbedError> {
        let tag = image.tag()?;
        let dir = tempfile::Builder::new()
            .prefix("swiftide-ssh-container-")
            .tempdir()
            .map_err(|e| TestbedError::io("creating the image's key directory", e))?;
        let keys = ContainerKeys::create(dir.path())?;
        let copies = vec![
            CopyToContainer::new(
                keys.keys_dir.join(AUTHORIZED_KEYS_FILE),
                format!("/keys/{AUTHORIZED_KEYS_FILE}"),
            ),
            CopyToContainer::new(
                keys.keys_dir.join(HOST_KEY_FILE),
                testcontainers::CopyTargetOptions::new(format!("/keys/{HOST_KEY_FILE}"))
                    .with_mode(0o600),
            ),
        ];
        let (name, tag) = match tag.split_once(':') {
            Some((name, tag)) => (name.to_owned(), tag.to_owned()),
            None => (tag, "latest".to_owned()),
        };
        Ok(Self {
            image,
            name,
            tag,
            loopback: false,
            ready: match image {
                DockerImage::DropbearBusybox => "testbed: listening on port 22",
                _ => "Server listening on ",
            },
            copies,
            keys: Arc::new(Keys { keys, _dir: dir }),
            user: DOCKER_USER.to_owned(),
        })
    }

    /// The account that [`SshConnection::user`] names: one of the image's
    /// [`users`](DockerImage::users), e.g. the OpenSSH image's `sudo-nopasswd`
    /// ([`Escalation::docker_user`](crate::Escalation::docker_user)). The keys are
    /// authorized for every one of them; a name the image does not have fails only when
    /// the client logs in. (Not to be confused with [`ImageExt::with_user`], the user the
    /// container's server runs as.)
    ///
    /// Defaults to [`DOCKER_USER`] (`tester`).
    pub fn user(mut self, name: impl Into<String>) -> Self {
        self.user = name.into();
        self
    }

    /// Names the image `name:tag` instead, e.g. one pushed to your registry
    /// (`registry.example.com/ci/swiftide-ssh-testbed-openssh`, `"0.1"`) or the moving
    /// local tag `latest`. It must be built from the same [`DockerImage`]'s context:
    /// the readiness signal and the keys depend on its entrypoint.
    ///
    /// Defaults to `swiftide-ssh-testbed-<name>` and [`DockerImage::tag`]'s hash.
    pub fn named(mut self, name: impl Into<String>, tag: impl Into<String>) -> Self {
        self.name = name.into();
        self.tag = tag.into();
        self
    }

    /// Which server image this is.
    pub fn image(&self) -> DockerImage {
        self.image
    }

    /// The host key the container will have, as `ssh-ed25519 AAAA...` (no comment).
    pub fn host_public_key(&self) -> &str {
        &self.keys.keys.host_public_key
    }

    /// Builds the image with `docker/prepare.sh build <name>` unless it exists (in a
    /// blocking task: a first build takes tens of seconds), so that `testcontainers` does
    /// not try to pull it. Does nothing for an image [`named`](Self::named) otherwise:
    /// that one is pulled.
    ///
    /// # Errors
    ///
    /// As for [`DockerImage::ensure_built`].
    pub async fn ensure_built(&self) -> Result<(), TestbedError> {
        if format!("{}:{}", self.name, self.tag) != self.image.tag()? {
            return Ok(());
        }
        let image = self.image;
        tokio::task::spawn_blocking(move || image.ensure_built())
            .await
            .map_err(|e| TestbedError::io("building the image", std::io::Error::other(e)))?
            .map(drop)
    }

    /// A request that publishes port 22 on `127.0.0.1` only (an ephemeral port), not on
    /// every interface as `testcontainers` does by default; [`SshConnection::of`] then
    /// connects to `127.0.0.1`. Needs the Docker daemon on this machine. Replaces any
    /// [`ImageExt::with_host_config_modifier`] set before (set none after it).
    pub fn on_loopback(mut self) -> ContainerRequest<Self> {
        self.loopback = true;
        self.with_host_config_modifier(|config: &mut HostConfig| {
            config.publish_all_ports = Some(false);
            let binding = PortBinding {
                host_ip: Some(Ipv4Addr::LOCALHOST.to_string()),
                host_port: Some(String::new()),
            };
            config.port_bindings = Some(
                [(SSH_PORT.to_string(), Some(vec![binding]))]
                    .into_iter()
                    .collect(),
            );
        })
    }
}

impl Image for SshImage {
    fn name(&self) -> &str {
        &self.name
    }

    fn tag(&self) -> &str {
        &self.tag
    }

    fn ready_conditions(&self) -> Vec<WaitFor> {
        vec![WaitFor::message_on_stderr(self.ready)]
    }

    fn copy_to_sources(&self) -> impl IntoIterator<Item = &CopyToContainer> {
        &self.copies
    }

    fn expose_ports(&self) -> &[ContainerPort] {
        std::slice::from_ref(&SSH_PORT)
    }
}

/// How to reach a running [`SshImage`] container over SSH, with strict host-key
/// checking: [`of`](Self::of) reads the mapped port and writes the `known_hosts` file.
#[cfg_attr(docsrs, doc(cfg(feature = "testcontainers")))]
#[derive(Debug, Clone)]
pub struct SshConnection {
    host: String,
    port: u16,
    host_public_key: String,
    user: String,
    keys: Arc<Keys>,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("dir", &self._dir.path())
            .finish_non_exhaustive()
    }
}

impl SshConnection {
    /// The connection facts of `container`: its host (`127.0.0.1` for a request made with
    /// [`SshImage::on_loopback`], otherwise what `testcontainers` reports, e.g.
    /// `localhost`), the host port mapped to 22 (IPv4), and a `known_hosts` file with the
    /// container's host key for `[host]:port`, (re)written now.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Container`] if `testcontainers` cannot tell the host or port;
    /// [`TestbedError::Io`] if `known_hosts` cannot be written.
    pub async fn of(container: &ContainerAsync<SshImage>) -> Result<Self, TestbedError> {
        let image = container.image();
        let port = container
            .get_host_port_ipv4(SSH_PORT)
            .await
            .map_err(|source| TestbedError::Container {
                what: "reading the mapped SSH port".to_owned(),
                source,
            })?;
        let host = if image.loopback {
            Ipv4Addr::LOCALHOST.to_string()
        } else {
            container
                .get_host()
                .await
                .map_err(|source| TestbedError::Container {
                    what: "reading the container's host".to_owned(),
                    source,
                })?
                .to_string()
        };
        let keys = Arc::clone(&image.keys);
        let host_public_key = keys.keys.host_public_key.clone();
        let known_hosts = keys.keys.known_hosts();
        tokio::fs::write(known_hosts, format!("[{host}]:{port} {host_public_key}\n"))
            .await
            .map_err(|e| TestbedError::io(format!("writing {}", known_hosts.display()), e))?;
        Ok(Self {
            host,
            port,
            host_public_key,
            user: image.user.clone(),
            keys,
        })
    }

    /// The address to connect to.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The host port mapped to the container's port 22.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The user to log in as: [`DOCKER_USER`] (`tester`, login shell `/bin/sh`) or the one
    /// chosen with [`SshImage::user`].
    pub fn user(&self) -> &str {
        &self.user
    }

    /// An unencrypted ed25519 client key (OpenSSH format, mode 0600), authorized for
    /// every account of the image.
    pub fn private_key_path(&self) -> &Path {
        self.keys.keys.client_key()
    }

    /// The client key encrypted with [`KEY_PASSPHRASE`](crate::KEY_PASSPHRASE), also
    /// authorized.
    pub fn encrypted_private_key_path(&self) -> &Path {
        self.keys.keys.encrypted_key()
    }

    /// A `known_hosts` file with the container's host key for `[host]:port`.
    pub fn known_hosts_path(&self) -> &Path {
        self.keys.keys.known_hosts()
    }

    /// The container's host key as `ssh-ed25519 AAAA...` (no comment).
    pub fn host_public_key(&self) -> &str {
        &self.host_public_key
    }
}
