//! SSH servers in Docker containers: [`DockerTestbed`].
//!
//! Everything goes through the `docker` CLI (no Docker API client), so that the crate
//! keeps its single dependency. Images are built by `docker/prepare.sh`, which also
//! computes their tags (a hash of the build context), so the script and this module
//! always agree on which image is current.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, Once, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{TestbedError, free_port, probe_banner_within, system};

/// The environment variable that overrides the `docker` CLI (a path or a name on `PATH`).
pub const DOCKER_CLI_ENV_VAR: &str = "SWIFTIDE_SSH_TESTBED_DOCKER";

/// Every container of a [`DockerTestbed`] carries this label with the value `1`.
pub const CONTAINER_LABEL: &str = "swiftide-ssh-testbed";

/// The label holding the pid of the process that started the container (see
/// [`DockerTestbed::cleanup_stale`]).
pub const OWNER_PID_LABEL: &str = "swiftide-ssh-testbed.owner-pid";

/// The label holding the owner's start time (clock ticks after boot, from
/// `/proc/<pid>/stat`), so that a reused pid is not mistaken for the owner.
pub const OWNER_START_LABEL: &str = "swiftide-ssh-testbed.owner-start";

/// The label holding the owner's host name; [`DockerTestbed::cleanup_stale`] only
/// judges containers started from the same host.
pub const OWNER_HOST_LABEL: &str = "swiftide-ssh-testbed.owner-host";

/// The account the Docker images log in as by default (login shell `/bin/sh`, not root;
/// see [`DockerTestbedBuilder::user`] for the others).
pub const DOCKER_USER: &str = "tester";

/// The accounts of the OpenSSH image that log in over SSH: [`DOCKER_USER`] and one per
/// [`Escalation`](crate::Escalation) rule
/// ([`Escalation::docker_user`](crate::Escalation::docker_user)).
const OPENSSH_USERS: &[&str] = &[
    DOCKER_USER,
    "sudo-nopasswd",
    "sudo-password",
    "sudo-tty",
    "sudo-lecture",
    "sudo-none",
    "doas-nopass",
    "doas-password",
];

/// The script that builds the images and computes their tags (shipped in the crate).
/// How many times `pause` tries `docker pause` when the cgroup freezer gives up on a busy
/// machine.
const PAUSE_ATTEMPTS: u32 = 8;

const PREPARE_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docker/prepare.sh");

/// The names under `/keys` in the container that the entrypoints install.
pub(crate) const AUTHORIZED_KEYS_FILE: &str = "authorized_keys";
pub(crate) const HOST_KEY_FILE: &str = "ssh_host_ed25519_key";

/// `docker/prepare.sh` inside this crate's source (also in the published crate, next to
/// the Docker build contexts): `bash <path>` installs Docker if needed and builds the
/// images, `bash <path> tag openssh` prints a tag. See the README's "Prepare the machine".
pub fn prepare_script() -> &'static Path {
    Path::new(PREPARE_SCRIPT)
}

/// Default for [`DockerTestbedBuilder::ready_timeout`].
const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How many published ports are tried when docker cannot bind one.
const PORT_ATTEMPTS: u32 = 5;

/// Which server a [`DockerTestbed`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum DockerImage {
    /// OpenSSH 9.2 on Debian bookworm (`docker/Dockerfile`): exec, SFTP
    /// (`internal-sftp`), python3, `SWIFTIDE_SSH_TESTBED=1` in every session.
    #[default]
    OpenSsh,
    /// Dropbear 2022.83 with BusyBox 1.35 as the only userland
    /// (`docker/dropbear/Dockerfile`): `/bin/sh` is BusyBox's ash, no bash, no
    /// coreutils, no SFTP server, no python; sessions get no extra environment.
    DropbearBusybox,
}

impl DockerImage {
    /// The image's short name in `prepare.sh` (`openssh`, `dropbear`).
    pub fn name(self) -> &'static str {
        match self {
            Self::OpenSsh => "openssh",
            Self::DropbearBusybox => "dropbear",
        }
    }

    /// The accounts that may log in over SSH (with the testbed's keys, login shell
    /// `/bin/sh`): [`DOCKER_USER`] in both images; in the OpenSSH image also the escalation
    /// accounts `sudo-nopasswd`, `sudo-password`, `sudo-tty`, `sudo-lecture`, `sudo-none`,
    /// `doas-nopass` and `doas-password`, each with the rule of one
    /// [`Escalation`](crate::Escalation) variant
    /// ([`Escalation::docker_user`](crate::Escalation::docker_user)) and the password
    /// [`BECOME_PASSWORD`](crate::BECOME_PASSWORD). Root cannot log in; it has the password
    /// [`ROOT_PASSWORD`](crate::ROOT_PASSWORD) for `su` in both images.
    pub fn users(self) -> &'static [&'static str] {
        match self {
            Self::OpenSsh => OPENSSH_USERS,
            Self::DropbearBusybox => &[DOCKER_USER],
        }
    }

    /// The image's tag, `swiftide-ssh-testbed-<name>:<hash of its build context>`, as
    /// computed by `prepare.sh tag <name>` (cached for the life of the process).
    ///
    /// # Errors
    ///
    /// [`TestbedError::Io`]/[`TestbedError::Command`] if the script cannot be run.
    pub fn tag(self) -> Result<String, TestbedError> {
        static TAGS: Mutex<Option<HashMap<DockerImage, String>>> = Mutex::new(None);
        let mut tags = TAGS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tag) = tags.as_ref().and_then(|t| t.get(&self)) {
            return Ok(tag.clone());
        }
        let output = system::run_checked(
            Command::new("bash")
                .arg(PREPARE_SCRIPT)
                .arg("tag")
                .arg(self.name()),
            &format!("`bash {PREPARE_SCRIPT} tag {}`", self.name()),
        )?;
        let tag = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        tags.get_or_insert_with(HashMap::new)
            .insert(self, tag.clone());
        Ok(tag)
    }

    /// Builds the image unless it exists (`prepare.sh build <name>`, which also builds
    /// the debootstrap base image when missing; serialised across processes with a
    /// lock file) and returns its [tag](Self::tag).
    ///
    /// # Errors
    ///
    /// [`TestbedError::DockerUnavailable`] without a usable docker;
    /// [`TestbedError::Command`] (with the script's output) if the build fails.
    pub fn ensure_built(self) -> Result<String, TestbedError> {
        static BUILDING: Mutex<()> = Mutex::new(());
        let tag = self.tag()?;
        if image_exists(&tag) {
            return Ok(tag);
        }
        let _guard = BUILDING.lock().unwrap_or_else(PoisonError::into_inner);
        if image_exists(&tag) {
            return Ok(tag);
        }
        DockerTestbed::available().map_err(|reason| TestbedError::DockerUnavailable { reason })?;
        system::run_checked(
            Command::new("bash")
                .arg(PREPARE_SCRIPT)
                .arg("build")
                .arg(self.name())
                .env("DOCKER", docker_cli()),
            &format!("`bash {PREPARE_SCRIPT} build {}`", self.name()),
        )?;
        Ok(tag)
    }
}

/// Configures a [`DockerTestbed`]; created by [`DockerTestbed::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct DockerTestbedBuilder {
    image: DockerImage,
    server_args: Vec<String>,
    ready_timeout: Duration,
    memory_limit: Option<String>,
    mounts: Vec<PathBuf>,
    user: String,
}

impl Default for DockerTestbedBuilder {
    fn default() -> Self {
        Self {
            image: DockerImage::OpenSsh,
            server_args: Vec::new(),
            ready_timeout: DEFAULT_READY_TIMEOUT,
            memory_limit: None,
            mounts: Vec::new(),
            user: DOCKER_USER.to_owned(),
        }
    }
}

impl DockerTestbedBuilder {
    /// The server image.
    ///
    /// Defaults to [`DockerImage::OpenSsh`].
    pub fn image(mut self, image: DockerImage) -> Self {
        self.image = image;
        self
    }

    /// Appends an argument for the server: sshd options such as `-o` and
    /// `MaxSessions=1` for [`DockerImage::OpenSsh`], dropbear options (`-j`, `-k`,
    /// `-K 1`, ...) for [`DockerImage::DropbearBusybox`].
    ///
    /// Defaults to none.
    pub fn server_arg(mut self, arg: impl Into<String>) -> Self {
        self.server_args.push(arg.into());
        self
    }

    /// How long the container may take to send its SSH banner after starting (also for
    /// [`DockerTestbed::start_again`], [`DockerTestbed::restart`] and
    /// [`DockerTestbed::reconnect_network`]).
    ///
    /// Defaults to 60 s (generous: many containers starting at once on a busy machine).
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// `docker create --memory <limit>` (e.g. `"64m"`).
    ///
    /// Defaults to no limit.
    pub fn memory_limit(mut self, limit: impl Into<String>) -> Self {
        self.memory_limit = Some(limit.into());
        self
    }

    /// Bind-mounts the local directory `host_dir` into the container at the **same**
    /// absolute path, read-write, so that a command run over SSH and one run locally see
    /// the same files at the same paths (e.g. to compare the executor with swiftide's
    /// `LocalExecutor`). May be called several times.
    ///
    /// At start the directory is created if missing and made writable for everyone
    /// (its own mode gains `a+rwx`; its contents are left alone), because the container
    /// logs in as [`DOCKER_USER`] (uid 1000), which usually does not own it. Files that
    /// `tester` creates there belong to uid 1000 on the host. Entries created later by
    /// another local user must be made accessible by the caller (`chmod -R a+rwX`).
    /// Needs a local Docker daemon (the path is the daemon's).
    ///
    /// Defaults to no mounts.
    pub fn mount(mut self, host_dir: impl Into<PathBuf>) -> Self {
        self.mounts.push(host_dir.into());
        self
    }

    /// The account to log in as: one of the image's [`users`](DockerImage::users), e.g. an
    /// escalation account of the OpenSSH image such as `sudo-nopasswd`
    /// ([`Escalation::docker_user`](crate::Escalation::docker_user)). [`DockerTestbed::user`]
    /// returns it and [`DockerTestbed::ssh_command`] logs in as it; the keys are the same
    /// for every account. [`mount`](Self::mount)ed directories are writable for it too.
    ///
    /// Another name makes [`start`](Self::start) fail with [`TestbedError::Unsupported`].
    ///
    /// Defaults to [`DOCKER_USER`] (`tester`).
    pub fn user(mut self, name: impl Into<String>) -> Self {
        self.user = name.into();
        self
    }

    /// Builds the image if needed, starts a container and waits for its SSH banner. See
    /// [`DockerTestbed`].
    ///
    /// # Errors
    ///
    /// [`TestbedError::Unsupported`] for a [`user`](Self::user) the image does not have;
    /// [`TestbedError::DockerUnavailable`] without a `docker` CLI or daemon;
    /// [`TestbedError::Command`] if a docker command (or the image build) fails;
    /// [`TestbedError::StartFailed`] (with the container's log) if the server exits or
    /// does not send its banner in time; [`TestbedError::Io`] for local files (also a
    /// [`mount`](Self::mount) path that is not absolute or cannot be prepared).
    pub fn start(self) -> Result<DockerTestbed, TestbedError> {
        DockerTestbed::launch(self)
    }
}

/// The files of a Docker testbed (in a private temporary directory).
#[derive(Debug)]
struct Files {
    client_key: PathBuf,
    encrypted_key: PathBuf,
    unauthorized_key: PathBuf,
    known_hosts: PathBuf,
}

/// The keys of a container: the files the client uses, and the directory whose contents
/// go to the container's `/keys` (both images' entrypoints install them from there).
#[derive(Debug)]
pub(crate) struct ContainerKeys {
    /// `authorized_keys` and `ssh_host_ed25519_key`.
    pub(crate) keys_dir: PathBuf,
    files: Files,
    /// `ssh-ed25519 AAAA...`, without the comment.
    pub(crate) host_public_key: String,
}

impl ContainerKeys {
    /// Generates a fresh host key and writes it, the `authorized_keys` for the process-wide
    /// client keys and the client keys into `dir` (`known_hosts` is written once the port
    /// is known).
    pub(crate) fn create(dir: &Path) -> Result<Self, TestbedError> {
        let keys_dir = dir.join("keys");
        fs::create_dir(&keys_dir)
            .map_err(|e| TestbedError::io(format!("creating {}", keys_dir.display()), e))?;
        let host_key = system::generate_key(
            &keys_dir.join(HOST_KEY_FILE),
            "swiftide-ssh-testbed-docker-host",
        )?;
        let host_public_key = host_key
            .public
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        let files = Files {
            client_key: dir.join("id_ed25519"),
            encrypted_key: dir.join("id_ed25519_encrypted"),
            unauthorized_key: dir.join("id_ed25519_unauthorized"),
            known_hosts: dir.join("known_hosts"),
        };
        let keys = system::client_keys()?;
        keys.plain.write(&files.client_key)?;
        keys.encrypted.write(&files.encrypted_key)?;
        keys.unauthorized.write(&files.unauthorized_key)?;
        let authorized = format!("{}\n{}\n", keys.plain.public, keys.encrypted.public);
        system::write_file(
            &keys_dir.join(AUTHORIZED_KEYS_FILE),
            authorized.as_bytes(),
            0o644,
        )?;
        Ok(Self {
            keys_dir,
            files,
            host_public_key,
        })
    }

    #[cfg(feature = "testcontainers")]
    pub(crate) fn client_key(&self) -> &Path {
        &self.files.client_key
    }

    #[cfg(feature = "testcontainers")]
    pub(crate) fn encrypted_key(&self) -> &Path {
        &self.files.encrypted_key
    }

    #[cfg(feature = "testcontainers")]
    pub(crate) fn known_hosts(&self) -> &Path {
        &self.files.known_hosts
    }
}

/// An SSH server in a Docker container, for tests: OpenSSH on Debian or Dropbear on
/// BusyBox ([`DockerImage`]), logging in as [`DOCKER_USER`] (or another of the image's
/// [`users`](DockerImage::users)) with a fresh key pair and a fresh host key, published on
/// an ephemeral port of `127.0.0.1`.
///
/// The container carries the label [`CONTAINER_LABEL`]`=1` and the owner labels
/// ([`OWNER_PID_LABEL`], ...). It is removed (`docker rm -f`) when the testbed is dropped,
/// by a watchdog process when the test process dies without dropping it, and by
/// [`DockerTestbed::cleanup_stale`] (run once per process by the first start) after a
/// crash of both.
///
/// Every method blocks while it runs the `docker` CLI (tens of milliseconds per call).
#[derive(Debug)]
pub struct DockerTestbed {
    image: DockerImage,
    tag: String,
    container_id: String,
    port: u16,
    network: String,
    container_ip: Option<IpAddr>,
    host_public_key: String,
    ready_timeout: Duration,
    user: String,
    files: Files,
    watchdog: Option<Child>,
    dir: TempDir,
}

impl DockerTestbed {
    /// Starts an OpenSSH container with the default settings
    /// (`DockerTestbed::builder().start()`).
    ///
    /// # Errors
    ///
    /// See [`DockerTestbedBuilder::start`].
    pub fn start() -> Result<DockerTestbed, TestbedError> {
        Self::builder().start()
    }

    /// A builder to pick the image and options.
    pub fn builder() -> DockerTestbedBuilder {
        DockerTestbedBuilder::default()
    }

    /// Whether Docker can be used: `Ok(())`, or why not (no `docker` CLI, daemon not
    /// reachable). Tests should skip with this reason when it fails outside CI, and fail
    /// in CI.
    ///
    /// # Errors
    ///
    /// The reason, as text.
    pub fn available() -> Result<(), String> {
        let cli = docker_cli();
        let output = Command::new(&cli)
            .args(["version", "--format", "{{.Server.Version}}"])
            .stdin(Stdio::null())
            .output();
        match output {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
                "no docker CLI ({} not found on PATH; apt-get install -y docker.io, or set {})",
                cli.to_string_lossy(),
                DOCKER_CLI_ENV_VAR
            )),
            Err(e) => Err(format!("cannot run {}: {e}", cli.to_string_lossy())),
            Ok(output) if output.status.success() => Ok(()),
            Ok(output) => Err(format!(
                "the Docker daemon is not reachable (is dockerd running?): {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )),
        }
    }

    /// Removes (`docker rm -f`) labelled containers whose owner process is gone: started
    /// from this host (same [`OWNER_HOST_LABEL`]) by a pid that no longer exists, or that
    /// now belongs to a process with another start time. Returns how many were removed.
    ///
    /// # Errors
    ///
    /// [`TestbedError::DockerUnavailable`] without a usable docker;
    /// [`TestbedError::Command`] if `docker ps` or `docker rm` fails.
    pub fn cleanup_stale() -> Result<usize, TestbedError> {
        let format = format!(
            "{{{{.ID}}}}\t{{{{.Label \"{OWNER_PID_LABEL}\"}}}}\t{{{{.Label \
             \"{OWNER_START_LABEL}\"}}}}\t{{{{.Label \"{OWNER_HOST_LABEL}\"}}}}"
        );
        let listing = docker_checked(
            &[
                "ps",
                "-a",
                "--no-trunc",
                "--filter",
                &format!("label={CONTAINER_LABEL}=1"),
                "--format",
                &format,
            ],
            "listing testbed containers",
        )?;
        let host = host_name();
        let stale: Vec<String> = listing
            .lines()
            .filter_map(|line| {
                let mut fields = line.split('\t');
                let id = fields.next()?.trim();
                let pid = fields.next().unwrap_or_default().trim();
                let start = fields.next().unwrap_or_default().trim();
                let owner_host = fields.next().unwrap_or_default().trim();
                if id.is_empty() || owner_host != host {
                    return None;
                }
                let alive = pid
                    .parse::<u32>()
                    .ok()
                    .and_then(process_start_time)
                    .is_some_and(|actual| actual.to_string() == start);
                (!alive).then(|| id.to_owned())
            })
            .collect();
        if stale.is_empty() {
            return Ok(0);
        }
        let mut args = vec!["rm", "-f", "-v"];
        args.extend(stale.iter().map(String::as_str));
        docker_checked(&args, "removing stale testbed containers")?;
        Ok(stale.len())
    }

    /// The image the container runs.
    pub fn image(&self) -> DockerImage {
        self.image
    }

    /// The image's tag (`swiftide-ssh-testbed-<name>:<hash>`).
    pub fn image_tag(&self) -> &str {
        &self.tag
    }

    /// The address to connect to: `"127.0.0.1"` (the port is published there only).
    pub fn host(&self) -> String {
        Ipv4Addr::LOCALHOST.to_string()
    }

    /// The published port on `127.0.0.1` (fixed for the testbed's life, also across
    /// [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The user to log in as: [`DOCKER_USER`] (`tester`), or the account chosen with
    /// [`DockerTestbedBuilder::user`].
    pub fn user(&self) -> &str {
        &self.user
    }

    /// An unencrypted ed25519 client key (OpenSSH format, mode 0600, `.pub` next to it),
    /// authorized for every account of the image ([`DockerImage::users`]).
    pub fn private_key_path(&self) -> &Path {
        &self.files.client_key
    }

    /// The client key encrypted with [`KEY_PASSPHRASE`](crate::KEY_PASSPHRASE),
    /// authorized like [`private_key_path`](Self::private_key_path).
    pub fn encrypted_private_key_path(&self) -> &Path {
        &self.files.encrypted_key
    }

    /// A valid client key that is *not* authorized.
    pub fn unauthorized_private_key_path(&self) -> &Path {
        &self.files.unauthorized_key
    }

    /// A `known_hosts` file with the container's host key for `[127.0.0.1]:<port>` and,
    /// while the container has one, for its bridge address (`<container_ip>`, port 22).
    /// Rewritten when the bridge address changes (after a restart or reconnect).
    pub fn known_hosts_path(&self) -> &Path {
        &self.files.known_hosts
    }

    /// The host's public key as `ssh-ed25519 AAAA...` (no comment); generated for this
    /// testbed and kept across restarts.
    pub fn host_public_key(&self) -> &str {
        &self.host_public_key
    }

    /// The full container id.
    pub fn container_id(&self) -> &str {
        &self.container_id
    }

    /// The container's address on its Docker network (the default `bridge`), where the
    /// server listens on port 22; `None` while disconnected or stopped. Reachable from
    /// the Docker host itself.
    pub fn container_ip(&self) -> Option<IpAddr> {
        self.container_ip
    }

    /// The Docker network the container is attached to (`bridge`).
    pub fn network(&self) -> &str {
        &self.network
    }

    /// The testbed's private local directory (keys, `known_hosts`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The container's state as Docker reports it (`running`, `paused`, `exited`, ...).
    ///
    /// # Errors
    ///
    /// [`TestbedError::Command`] if `docker inspect` fails.
    pub fn state(&self) -> Result<String, TestbedError> {
        inspect(&self.container_id, "{{.State.Status}}")
    }

    /// What the server wrote to stdout and stderr (`docker logs`), across restarts.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Command`] if `docker logs` fails.
    pub fn logs(&self) -> Result<String, TestbedError> {
        let output = docker_output(&["logs", &self.container_id], "reading the container log")?;
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        Ok(text.replace("\r\n", "\n"))
    }

    /// `docker exec <container> sh -c <command>` as root, for assertions about the
    /// server independent of SSH (processes, files). Standard input is `/dev/null`.
    pub fn exec_command(&self, command: &str) -> Command {
        let mut cmd = Command::new(docker_cli());
        cmd.args(["exec", &self.container_id, "sh", "-c", command])
            .stdin(Stdio::null());
        cmd
    }

    /// Runs [`exec_command`](Self::exec_command) and returns its output, whatever its
    /// exit status.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Io`] if `docker` cannot be run.
    pub fn run(&self, command: &str) -> Result<Output, TestbedError> {
        self.exec_command(command)
            .output()
            .map_err(|e| TestbedError::io("running docker exec", e))
    }

    /// The OpenSSH client, ready to run `remote_command` as [`user`](Self::user) on
    /// `127.0.0.1:<port>` with [`private_key_path`](Self::private_key_path), strict host
    /// key checking against [`known_hosts_path`](Self::known_hosts_path), batch mode and
    /// no `ssh_config`; standard input `/dev/null`. Like
    /// [`Testbed::ssh_command`](crate::Testbed::ssh_command).
    pub fn ssh_command(&self, remote_command: &str) -> Command {
        system::ssh_client(
            &self.files.client_key,
            self.port,
            &self.files.known_hosts,
            &[],
            &format!("{}@{}", self.user, self.host()),
            remote_command,
        )
    }

    /// Runs [`ssh_command`](Self::ssh_command) and returns its output, whatever its exit
    /// status (255 for connection or authentication errors).
    ///
    /// # Errors
    ///
    /// [`TestbedError::Io`] if `ssh` cannot be run.
    pub fn ssh(&self, remote_command: &str) -> Result<Output, TestbedError> {
        self.ssh_command(remote_command)
            .output()
            .map_err(|e| TestbedError::io("running ssh (is openssh-client installed?)", e))
    }

    /// Whether a connection to `127.0.0.1:<port>` receives the `SSH-2.0-` banner within
    /// about `timeout` (connect and each read are bounded by it).
    pub fn banner_received(&self, timeout: Duration) -> bool {
        probe_banner_within(
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), self.port),
            timeout,
        )
    }

    /// Stops the container (`docker stop -t 2`: SIGTERM, SIGKILL after 2 s). Every
    /// connection drops and the published port refuses connections until
    /// [`start_again`](Self::start_again).
    ///
    /// # Errors
    ///
    /// [`TestbedError::Command`] if `docker stop` fails.
    pub fn stop(&mut self) -> Result<(), TestbedError> {
        docker_checked(
            &["stop", "-t", "2", &self.container_id],
            "stopping the container",
        )?;
        self.container_ip = None;
        Ok(())
    }

    /// Kills the container (`docker kill`: SIGKILL, no clean shutdown).
    ///
    /// # Errors
    ///
    /// [`TestbedError::Command`] if `docker kill` fails (e.g. it was not running).
    pub fn kill(&mut self) -> Result<(), TestbedError> {
        docker_checked(&["kill", &self.container_id], "killing the container")?;
        self.container_ip = None;
        Ok(())
    }

    /// Starts a stopped or killed container again (`docker start`), with the same port
    /// and host key, and waits for its banner.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Command`] if `docker start` fails (e.g. another process took the
    /// port meanwhile); [`TestbedError::StartFailed`] if no banner comes in time.
    pub fn start_again(&mut self) -> Result<(), TestbedError> {
        docker_checked(
            &["start", &self.container_id],
            "starting the container again",
        )?;
        self.after_start()
    }

    /// Restarts the container (`docker restart -t 2`), with the same port and host key,
    /// and waits for its banner.
    ///
    /// # Errors
    ///
    /// As for [`start_again`](Self::start_again).
    pub fn restart(&mut self) -> Result<(), TestbedError> {
        docker_checked(
            &["restart", "-t", "2", &self.container_id],
            "restarting the container",
        )?;
        self.after_start()
    }

    /// Freezes every process of the container (`docker pause`, the cgroup freezer): the
    /// server becomes a silent peer. Connections (new ones through the published port,
    /// too) are accepted by the kernel but get no data. Undo with
    /// [`unpause`](Self::unpause).
    ///
    /// # Errors
    ///
    /// [`TestbedError::Command`] if `docker pause` fails (after up to eight tries when
    /// the freezer gave up).
    pub fn pause(&self) -> Result<(), TestbedError> {
        // runc's cgroup-v1 freezer gives up ("unable to freeze", moby/moby#48205) when the
        // cgroup does not settle in FROZEN within its ~1000 tries (about 0.3 s here): a
        // task asleep in disk I/O is enough. CI hit it once, with 24 containers taking
        // faults at once; a container writing to its disk in a loop here fails about one
        // pause in three. runc thaws the cgroup before it reports that, so trying again is
        // safe, and the next try usually succeeds; any other failure is reported at once.
        let mut attempt = 1;
        loop {
            match docker_checked(&["pause", &self.container_id], "pausing the container") {
                Ok(_) => return Ok(()),
                Err(TestbedError::Command { ref stderr, .. })
                    if attempt < PAUSE_ATTEMPTS && stderr.contains("unable to freeze") =>
                {
                    attempt += 1;
                    thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Thaws a [paused](Self::pause) container.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Command`] if `docker unpause` fails.
    pub fn unpause(&self) -> Result<(), TestbedError> {
        docker_checked(&["unpause", &self.container_id], "unpausing the container").map(drop)
    }

    /// Takes the container off its network (`docker network disconnect`): it keeps
    /// running without any interface but loopback, its bridge address goes away and the
    /// published port stops working (connections are refused or closed at once; this
    /// is *not* a silent cut, see [`pause`](Self::pause) for a silent peer). Established
    /// connections through the published port break.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Command`] if `docker network disconnect` fails (e.g. it is already
    /// disconnected).
    pub fn disconnect_network(&mut self) -> Result<(), TestbedError> {
        docker_checked(
            &["network", "disconnect", &self.network, &self.container_id],
            "disconnecting the container from its network",
        )?;
        self.container_ip = None;
        Ok(())
    }

    /// Reattaches the container to its network (`docker network connect`), which
    /// republishes the port; the bridge address may change (the known_hosts file follows).
    /// Waits for the banner on the published port.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Command`] if `docker network connect` fails;
    /// [`TestbedError::StartFailed`] if no banner comes in time.
    pub fn reconnect_network(&mut self) -> Result<(), TestbedError> {
        docker_checked(
            &["network", "connect", &self.network, &self.container_id],
            "reconnecting the container to its network",
        )?;
        self.after_start()
    }

    /// Refreshes the bridge address and known_hosts, and waits for the banner.
    fn after_start(&mut self) -> Result<(), TestbedError> {
        self.refresh_ip()?;
        self.wait_ready()
    }

    fn refresh_ip(&mut self) -> Result<(), TestbedError> {
        let (network, ip) = container_network(&self.container_id)?;
        if let Some(network) = network {
            self.network = network;
        }
        self.container_ip = ip;
        self.write_known_hosts()
    }

    fn write_known_hosts(&self) -> Result<(), TestbedError> {
        let mut text = format!("[{}]:{} {}\n", self.host(), self.port, self.host_public_key);
        if let Some(ip) = self.container_ip {
            text.push_str(&format!("{ip} {}\n", self.host_public_key));
        }
        system::write_file(&self.files.known_hosts, text.as_bytes(), 0o644)
    }

    /// Waits until the published port delivers the banner; fails early if the container
    /// stopped.
    fn wait_ready(&self) -> Result<(), TestbedError> {
        let deadline = Instant::now() + self.ready_timeout;
        let mut last_state_check = Instant::now();
        loop {
            if self.banner_received(Duration::from_secs(1)) {
                return Ok(());
            }
            if last_state_check.elapsed() > Duration::from_millis(500) {
                last_state_check = Instant::now();
                let state = self.state().unwrap_or_default();
                if state == "exited" || state == "dead" {
                    return Err(TestbedError::StartFailed {
                        reason: format!("the container {} exited", short(&self.container_id)),
                        log: self.logs().unwrap_or_default(),
                    });
                }
            }
            if Instant::now() > deadline {
                return Err(TestbedError::StartFailed {
                    reason: format!(
                        "no SSH banner on 127.0.0.1:{} within {} s (container {}, state {})",
                        self.port,
                        self.ready_timeout.as_secs(),
                        short(&self.container_id),
                        self.state().unwrap_or_default()
                    ),
                    log: self.logs().unwrap_or_default(),
                });
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    fn launch(settings: DockerTestbedBuilder) -> Result<DockerTestbed, TestbedError> {
        if !settings.image.users().contains(&settings.user.as_str()) {
            return Err(TestbedError::Unsupported {
                what: format!(
                    "the user {:?} in the {} image (it has {})",
                    settings.user,
                    settings.image.name(),
                    settings.image.users().join(", ")
                ),
            });
        }
        Self::available().map_err(|reason| TestbedError::DockerUnavailable { reason })?;
        static CLEANUP: Once = Once::new();
        CLEANUP.call_once(|| {
            // Best effort: leftovers of crashed runs.
            let _ = Self::cleanup_stale();
        });
        let tag = settings.image.ensure_built()?;
        for dir in &settings.mounts {
            prepare_mount(dir)?;
        }

        let dir = tempfile::Builder::new()
            .prefix("swiftide-ssh-docker-")
            .tempdir()
            .map_err(|e| TestbedError::io("creating the testbed directory", e))?;
        let ContainerKeys {
            keys_dir,
            files,
            host_public_key,
        } = ContainerKeys::create(dir.path())?;

        let mut attempt = 0;
        let (container_id, port, watchdog) = loop {
            attempt += 1;
            let port = free_port(IpAddr::V4(Ipv4Addr::LOCALHOST))?;
            let id = create_container(&settings, &tag, port)?;
            // From here on the container is removed on every path out.
            let watchdog = spawn_watchdog(&id);
            let guard = RemoveOnDrop {
                id: Some(id),
                watchdog,
            };
            let id = guard.id.as_deref().unwrap_or_default();
            let keys_source = format!("{}/.", keys_dir.display());
            docker_checked(
                &["cp", &keys_source, &format!("{id}:/keys")],
                "copying the keys into the container",
            )?;
            match docker_output(&["start", id], "starting the container") {
                Ok(output) if output.status.success() => break guard.disarm_with(port),
                Ok(output) => {
                    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
                    let port_busy = stderr.contains("already allocated")
                        || stderr.contains("address already in use");
                    if port_busy && attempt < PORT_ATTEMPTS {
                        continue;
                    }
                    return Err(TestbedError::Command {
                        what: "`docker start` (starting the container)".to_owned(),
                        status: output.status,
                        stderr,
                    });
                }
                Err(e) => return Err(e),
            }
        };
        let mut testbed = DockerTestbed {
            image: settings.image,
            tag,
            container_id,
            port,
            network: "bridge".to_owned(),
            container_ip: None,
            host_public_key,
            ready_timeout: settings.ready_timeout,
            user: settings.user,
            files,
            watchdog,
            dir,
        };
        // On error, dropping the testbed removes the container.
        testbed.after_start()?;
        Ok(testbed)
    }
}

impl Drop for DockerTestbed {
    fn drop(&mut self) {
        remove_container(&self.container_id);
        if let Some(watchdog) = self.watchdog.take() {
            stop_watchdog(watchdog);
        }
    }
}

/// Removes a container (and stops its watchdog) unless disarmed.
struct RemoveOnDrop {
    id: Option<String>,
    watchdog: Option<Child>,
}

impl RemoveOnDrop {
    fn disarm_with(mut self, port: u16) -> (String, u16, Option<Child>) {
        (
            self.id.take().unwrap_or_default(),
            port,
            self.watchdog.take(),
        )
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            remove_container(&id);
        }
        if let Some(watchdog) = self.watchdog.take() {
            stop_watchdog(watchdog);
        }
    }
}

fn create_container(
    settings: &DockerTestbedBuilder,
    tag: &str,
    port: u16,
) -> Result<String, TestbedError> {
    let me = std::process::id();
    let mut args: Vec<String> = vec![
        "create".into(),
        "--init".into(),
        "--label".into(),
        format!("{CONTAINER_LABEL}=1"),
        "--label".into(),
        format!("{OWNER_PID_LABEL}={me}"),
        "--label".into(),
        format!(
            "{OWNER_START_LABEL}={}",
            process_start_time(me).unwrap_or_default()
        ),
        "--label".into(),
        format!("{OWNER_HOST_LABEL}={}", host_name()),
        "--publish".into(),
        format!("127.0.0.1:{port}:22"),
    ];
    if let Some(limit) = &settings.memory_limit {
        args.push("--memory".into());
        args.push(limit.clone());
    }
    for dir in &settings.mounts {
        // `--mount` rather than `-v`: a path with a colon stays one path.
        let path = dir.to_string_lossy();
        if path.contains(',') || path.contains('"') {
            return Err(TestbedError::io(
                format!("mounting {path}"),
                io::Error::other("a mount path must not contain `,` or `\"`"),
            ));
        }
        args.push("--mount".into());
        args.push(format!("type=bind,source={path},target={path}"));
    }
    args.push(tag.to_owned());
    args.extend(settings.server_args.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let id = docker_checked(&args, "creating the container")?;
    let id = id.trim().to_owned();
    if id.is_empty() {
        return Err(TestbedError::io(
            "creating the container",
            io::Error::other("docker create printed no container id"),
        ));
    }
    Ok(id)
}

/// Creates a [`DockerTestbedBuilder::mount`] directory if needed and adds `a+rwx` to its
/// mode, so that the container's `tester` can write into it.
fn prepare_mount(dir: &Path) -> Result<(), TestbedError> {
    use std::os::unix::fs::PermissionsExt;
    let what = || format!("preparing the mount {}", dir.display());
    if !dir.is_absolute() {
        return Err(TestbedError::io(
            what(),
            io::Error::new(io::ErrorKind::InvalidInput, "the path must be absolute"),
        ));
    }
    fs::create_dir_all(dir).map_err(|e| TestbedError::io(what(), e))?;
    let mode = fs::metadata(dir)
        .map_err(|e| TestbedError::io(what(), e))?
        .permissions()
        .mode();
    if mode & 0o777 != 0o777 {
        fs::set_permissions(dir, fs::Permissions::from_mode((mode & 0o7777) | 0o777))
            .map_err(|e| TestbedError::io(what(), e))?;
    }
    Ok(())
}

/// The container's first network and its address there (`None`s when it has none).
fn container_network(id: &str) -> Result<(Option<String>, Option<IpAddr>), TestbedError> {
    let text = inspect(
        id,
        "{{range $name, $net := .NetworkSettings.Networks}}{{$name}} {{$net.IPAddress}}\n{{end}}",
    )?;
    let mut first_name = None;
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let Some(name) = parts.next() else { continue };
        let ip = parts.next().and_then(|ip| ip.parse::<IpAddr>().ok());
        if ip.is_some() {
            return Ok((Some(name.to_owned()), ip));
        }
        first_name.get_or_insert_with(|| name.to_owned());
    }
    Ok((first_name, None))
}

fn inspect(id: &str, format: &str) -> Result<String, TestbedError> {
    Ok(docker_checked(
        &["inspect", "--format", format, id],
        "inspecting the container",
    )?
    .trim()
    .to_owned())
}

fn image_exists(tag: &str) -> bool {
    Command::new(docker_cli())
        .args(["image", "inspect", "--format", "{{.Id}}", tag])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn remove_container(id: &str) {
    let _ = Command::new(docker_cli())
        .args(["rm", "-f", "-v", id])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The docker CLI: [`DOCKER_CLI_ENV_VAR`] or `docker`.
fn docker_cli() -> OsString {
    std::env::var_os(DOCKER_CLI_ENV_VAR)
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| OsString::from("docker"))
}

/// Runs `docker <args>`; a missing CLI is [`TestbedError::DockerUnavailable`].
fn docker_output(args: &[&str], what: &str) -> Result<Output, TestbedError> {
    Command::new(docker_cli())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                TestbedError::DockerUnavailable {
                    reason: format!(
                        "no docker CLI ({} not found)",
                        docker_cli().to_string_lossy()
                    ),
                }
            } else {
                TestbedError::io(format!("running docker ({what})"), e)
            }
        })
}

/// Runs `docker <args>`, fails unless it succeeds, and returns its stdout.
fn docker_checked(args: &[&str], what: &str) -> Result<String, TestbedError> {
    let output = docker_output(args, what)?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(TestbedError::Command {
            what: format!(
                "`docker {}` ({what})",
                args.first().copied().unwrap_or_default()
            ),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// The start time (field 22 of `/proc/<pid>/stat`) of a living process.
fn process_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is the state (field 3); zombies count as gone.
    if matches!(fields.first().copied(), Some("Z" | "X") | None) {
        return None;
    }
    fields.get(19)?.parse().ok()
}

fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_default()
}

/// Waits for end-of-file on stdin (the test process holds the write end: EOF means it
/// exited without dropping the testbed), then removes the container `$2` with the
/// docker CLI `$1`. Ignores SIGINT/SIGHUP, so that Ctrl-C on the test run (which
/// signals the whole process group) leaves it to do its job.
const WATCHDOG_SCRIPT: &str = r#"
trap '' INT HUP
while read -r _line; do :; done
exec "$1" rm -f -v "$2" >/dev/null 2>&1
"#;

fn spawn_watchdog(id: &str) -> Option<Child> {
    Command::new("sh")
        .arg("-c")
        .arg(WATCHDOG_SCRIPT)
        .arg("swiftide-ssh-testbed-docker-watchdog")
        .arg(docker_cli())
        .arg(id)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

fn stop_watchdog(mut watchdog: Child) {
    let _ = watchdog.kill();
    let _ = watchdog.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_of_this_process_is_known() {
        assert!(process_start_time(std::process::id()).is_some());
        assert!(process_start_time(u32::MAX).is_none());
    }

    #[test]
    fn openssh_users_are_the_images_accounts() {
        for escalation in crate::Escalation::ALL {
            assert!(
                OPENSSH_USERS.contains(&escalation.docker_user()),
                "{escalation:?}"
            );
        }
        let config = include_str!("../docker/sshd_config");
        let allowed: Vec<&str> = config
            .lines()
            .find_map(|line| line.strip_prefix("AllowUsers "))
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(allowed, OPENSSH_USERS);
        let dockerfile = include_str!("../docker/Dockerfile");
        for user in OPENSSH_USERS {
            assert!(dockerfile.contains(user), "{user}");
        }
    }

    #[test]
    fn docker_testbed_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<DockerTestbed>();
    }
}
