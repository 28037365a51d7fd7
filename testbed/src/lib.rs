#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
//! Starts real OpenSSH `sshd` processes on loopback for integration tests.
//!
//! Each [`Testbed`] owns a private temporary directory with a freshly generated host key,
//! an `sshd_config`, an `authorized_keys` file, a `known_hosts` file and client keys, and
//! runs `/usr/sbin/sshd -D` on an ephemeral port of `127.0.0.1`. Tests connect to
//! [`Testbed::host`]:[`Testbed::port`] as [`Testbed::user`] with
//! [`Testbed::private_key_path`] and verify the server with
//! [`Testbed::known_hosts_path`]. Dropping the testbed kills sshd (including every
//! per-connection process) and removes its files.
//!
//! Many testbeds may run at once, in one test process or in several.
//!
//! As root, [`TestbedBuilder::network_namespace`] runs sshd in a network namespace of its
//! own, reachable through a veth pair, so that a test can cut the host off the network
//! silently ([`Testbed::cut_network`]) and restore it ([`Testbed::restore_network`]).
//!
//! As root, [`TestbedBuilder::login_shell`] logs in as a dedicated account whose login
//! shell is bash, dash, zsh, mksh, BusyBox ash, fish, tcsh or any other
//! ([`LoginShell`]), and [`TestbedBuilder::dropbear`] runs Dropbear instead of sshd, with
//! or without an SFTP server ([`TestbedBuilder::sftp`]).
//!
//! As root, [`TestbedBuilder::escalation`] logs in as an unprivileged account that may
//! become root (or [`BECOME_TARGET_USER`]) through sudo, doas or su by one of the
//! [`Escalation`] rules, for tests of privilege escalation against the real programs.
//!
//! [`DockerTestbed`] runs the server in a Docker container instead (OpenSSH on Debian or
//! Dropbear on BusyBox, see [`DockerImage`]), with fault controls for the whole machine:
//! stop, kill, restart, pause, network disconnect. It needs the `docker` CLI and a
//! daemon; `testbed/docker/prepare.sh` sets both up and builds the images without a
//! container registry ([`prepare_script`] is its path inside this crate).
//!
//! With the feature `testcontainers`, `SshImage` offers the same images as
//! `testcontainers::Image`s, and `SshConnection` tells a test how to reach a running one
//! (mapped port, user, key, `known_hosts`).
//!
//! Requirements: Linux (`/proc`), the OpenSSH server (`apt-get install -y
//! openssh-server`) and client (`ssh-keygen`, `ssh`). As root, the harness creates
//! sshd's privilege separation directory `/run/sshd` when missing; without root it can
//! only log in as the current user.
//!
//! ```
//! use swiftide_ssh_testbed::Testbed;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let testbed = Testbed::start()?;
//! let output = testbed.run("echo hello")?;
//! assert!(output.status.success());
//! assert_eq!(String::from_utf8_lossy(&output.stdout), "hello\n");
//! # Ok(())
//! # }
//! ```

mod config;
#[cfg(feature = "testcontainers")]
mod containers;
mod docker;
mod dropbear;
mod error;
mod escalation;
mod netns;
mod prerequisite;
mod process;
mod shells;
mod system;

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

#[cfg(feature = "testcontainers")]
pub use containers::{SshConnection, SshImage};
pub use docker::{
    CONTAINER_LABEL, DOCKER_CLI_ENV_VAR, DOCKER_USER, DockerImage, DockerTestbed,
    DockerTestbedBuilder, OWNER_HOST_LABEL, OWNER_PID_LABEL, OWNER_START_LABEL, prepare_script,
};
pub use dropbear::{DEFAULT_DROPBEAR_PATH, DROPBEAR_SFTP_SERVER_PATH};
pub use error::TestbedError;
pub use escalation::{
    BECOME_PASSWORD, BECOME_TARGET_PASSWORD, BECOME_TARGET_USER, BECOME_USER_PREFIX,
    DOAS_BLOCK_BEGIN, DOAS_BLOCK_END, DOAS_CONF_PATH, Escalation, ROOT_PASSWORD,
    SUDOERS_FILE_PREFIX,
};
pub use prerequisite::{python_venv, skip_unless_ci};
pub use shells::{LOGIN_SHELL_USER_PREFIX, LoginShell, TESTBED_LIB_DIR};

/// The environment variable sshd sets (to `1`) in every session of a testbed, via
/// `SetEnv`. Lets tests check that a command really ran through the testbed's sshd.
pub const TESTBED_ENV_VAR: &str = "SWIFTIDE_SSH_TESTBED";

/// The environment variable sshd sets in every session of a testbed to that testbed's
/// [id](Testbed::id). Dropping the testbed kills every process that still carries it
/// (for example commands a test left running in the background).
pub const TESTBED_ID_ENV_VAR: &str = "SWIFTIDE_SSH_TESTBED_ID";

/// The account used by [`TestbedBuilder::unprivileged_user`].
pub const UNPRIVILEGED_USER: &str = "swiftide-ssh-test";

/// The passphrase of [`Testbed::encrypted_private_key_path`].
pub const KEY_PASSPHRASE: &str = "correct horse battery staple";

/// The password of [`UNPRIVILEGED_USER`] (see [`TestbedBuilder::password_auth`]).
pub const USER_PASSWORD: &str = "testbed-password-123";

/// The environment variable that overrides the sshd binary (an absolute path).
pub const SSHD_PATH_ENV_VAR: &str = "SWIFTIDE_SSH_TESTBED_SSHD";

/// Where sshd is looked for unless [`SSHD_PATH_ENV_VAR`] says otherwise.
pub const DEFAULT_SSHD_PATH: &str = "/usr/sbin/sshd";

/// sshd's privilege separation directory (needed when it runs as root).
const PRIVSEP_DIR: &str = "/run/sshd";

/// How long sshd may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `freeze` waits for SIGSTOP to take effect.
const FREEZE_TIMEOUT: Duration = Duration::from_secs(2);

/// How many ephemeral ports are tried when sshd cannot bind one.
const PORT_ATTEMPTS: u32 = 5;

/// [`TestbedBuilder::bin_sh`]: run by the machine's `/bin/sh` in the new mount namespace
/// as `sh -c SCRIPT <shell> <file /bin/sh names> <server> <args>...`.
const BIN_SH_SCRIPT: &str = r#"mount --bind "$0" "$1" && shift && exec "$@""#;

/// How many times a restart on the same port is tried when the port is busy.
const RESTART_ATTEMPTS: u32 = 3;

/// The SSH server a testbed runs (see [`TestbedBuilder::server`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Server {
    /// OpenSSH's `sshd` (the default).
    #[default]
    OpenSsh,
    /// Dropbear (`/usr/sbin/dropbear`, Debian package `dropbear-bin`).
    Dropbear,
}

impl Server {
    /// `"sshd"` or `"dropbear"`: the server's program name, which is also how its
    /// processes are called in `/proc/<pid>/comm` (per-connection processes included).
    pub fn name(self) -> &'static str {
        match self {
            Self::OpenSsh => "sshd",
            Self::Dropbear => "dropbear",
        }
    }
}

/// Configures a [`Testbed`]; created by [`Testbed::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct TestbedBuilder {
    unprivileged: bool,
    max_sessions: u32,
    max_startups: String,
    listen_address: IpAddr,
    port: Option<u16>,
    password_auth: bool,
    network_namespace: bool,
    client_alive: Option<(u32, u32)>,
    extra_lines: Vec<String>,
    server: Server,
    sftp: bool,
    login_shell: Option<LoginShell>,
    home_files: Vec<(PathBuf, Vec<u8>)>,
    bin_sh: Option<LoginShell>,
    escalation: Option<Escalation>,
}

impl Default for TestbedBuilder {
    fn default() -> Self {
        Self {
            unprivileged: false,
            max_sessions: 10,
            max_startups: "10:30:100".to_owned(),
            listen_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: None,
            password_auth: false,
            network_namespace: false,
            client_alive: None,
            extra_lines: Vec::new(),
            server: Server::OpenSsh,
            sftp: true,
            login_shell: None,
            home_files: Vec::new(),
            bin_sh: None,
            escalation: None,
        }
    }
}

impl TestbedBuilder {
    /// Log in as [`UNPRIVILEGED_USER`] instead of the current user.
    ///
    /// Requires root: the account is created when missing (`useradd --create-home
    /// --shell /bin/sh`) and its password is set to [`USER_PASSWORD`] with `chpasswd`
    /// (sshd without PAM refuses accounts whose password is locked, as a fresh account's
    /// is). The [scratch directory](Testbed::scratch_dir) is owned by that user.
    ///
    /// Defaults to the current user (root in CI containers).
    pub fn unprivileged_user(mut self) -> Self {
        self.unprivileged = true;
        self
    }

    /// sshd's `MaxSessions`: how many sessions (channels) one connection may open.
    ///
    /// Defaults to 10.
    pub fn max_sessions(mut self, n: u32) -> Self {
        self.max_sessions = n;
        self
    }

    /// sshd's `MaxStartups` (`start:rate:full`): how many unauthenticated connections
    /// sshd accepts at once.
    ///
    /// Defaults to `"10:30:100"`.
    pub fn max_startups(mut self, spec: impl Into<String>) -> Self {
        self.max_startups = spec.into();
        self
    }

    /// The address sshd listens on (and that [`Testbed::host`] returns).
    ///
    /// Defaults to `127.0.0.1`.
    pub fn listen_address(mut self, addr: IpAddr) -> Self {
        self.listen_address = addr;
        self
    }

    /// The port sshd listens on. With a fixed port, start-up fails if the port is busy.
    ///
    /// Defaults to an ephemeral free port (picked by binding port 0 and releasing it;
    /// if sshd then fails to bind it because another process grabbed it meanwhile, a new
    /// port is tried, up to 5 times).
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// sshd's `PasswordAuthentication`. When enabled, `PermitRootLogin` becomes `yes`
    /// (otherwise `prohibit-password`). Only [`UNPRIVILEGED_USER`] has a known password
    /// ([`USER_PASSWORD`]).
    ///
    /// Defaults to `false`.
    pub fn password_auth(mut self, enabled: bool) -> Self {
        self.password_auth = enabled;
        self
    }

    /// Runs sshd in a network namespace of its own, reachable from this machine through
    /// a veth pair, so that a test can cut the host off the network
    /// ([`Testbed::cut_network`]) and restore it ([`Testbed::restore_network`]).
    ///
    /// The testbed claims a free slot `n` in 1..=254 (atomically, so concurrent testbeds in
    /// any number of processes never share one): the namespace `swiftide-tb-<n>`, the
    /// interface `swtb<n>h` in the root namespace with `10.213.<n>.1/30`, and its peer
    /// `swtb<n>p` inside with `10.213.<n>.2/30`. sshd runs inside (`ip netns exec`) and
    /// listens on `10.213.<n>.2`, which [`Testbed::host`] returns, on port 22 unless
    /// [`port`](Self::port) says otherwise ([`listen_address`](Self::listen_address) is
    /// ignored). Commands run inside the namespace but see the same file systems and
    /// processes as the test.
    ///
    /// The root namespace also gets the route `unreachable 10.213.0.0/16`, installed once
    /// and left in place: it only applies to addresses of testbeds that no longer exist,
    /// so that a socket still open to one never sends packets along the default route.
    ///
    /// Dropping the testbed deletes the namespace and the veth pair; so does a watchdog
    /// process if the test process dies first.
    ///
    /// Requires root and iproute2 (`ip`); without root, [`start`](Self::start) fails with
    /// [`TestbedError::NotRoot`].
    ///
    /// Defaults to `false` (sshd listens on loopback in the current namespace).
    pub fn network_namespace(mut self, enabled: bool) -> Self {
        self.network_namespace = enabled;
        self
    }

    /// sshd's `ClientAliveInterval` (seconds) and `ClientAliveCountMax`: when the client
    /// is silent, sshd sends keepalive requests and drops the connection once `count_max`
    /// of them are unanswered. This is how the server notices a client that vanished
    /// silently (a [network cut](Testbed::cut_network)) and ends its sessions. An interval
    /// of 0, or a `count_max` of 0, disables it.
    ///
    /// OpenSSH 9.2 sends a request only every *second* interval (it compares whole
    /// seconds with `>`), so a silent client is dropped after about
    /// `2 × interval_secs × (count_max + 1)` seconds: 5–6 s for `client_alive(1, 2)`.
    ///
    /// Defaults to unset (sshd's defaults: interval 0, count 3).
    pub fn client_alive(mut self, interval_secs: u32, count_max: u32) -> Self {
        self.client_alive = Some((interval_secs, count_max));
        self
    }

    /// Appends raw lines (the string may contain several, separated by newlines) to the
    /// generated `sshd_config`.
    ///
    /// sshd keeps the *first* value of most keywords, so a global line (one not inside a
    /// `Match` block) whose keyword the harness also sets (`MaxSessions`,
    /// `PasswordAuthentication`, `Subsystem sftp`, `LogLevel`, ...) replaces the
    /// harness's line; global `SetEnv` lines are merged into the harness's `SetEnv` (sshd
    /// only honours the first one). `Port`, `ListenAddress`, `HostKey` and `AllowUsers`
    /// lines add to the harness's values. `Match` blocks must come last, so pass them in
    /// the last calls.
    ///
    /// Defaults to no extra lines.
    pub fn sshd_config_line(mut self, line: impl Into<String>) -> Self {
        self.extra_lines.push(line.into());
        self
    }

    /// Log in as a dedicated account whose login shell is `shell`, so that commands run
    /// through that shell (`<shell> -c <command>`): [`LoginShell::account_name`], e.g.
    /// `swiftide-sh-fish`. [`Testbed::user`] returns it, [`Testbed::login_shell`] the
    /// shell. Takes precedence over [`unprivileged_user`](Self::unprivileged_user).
    ///
    /// Requires root (else [`start`](Self::start) fails with [`TestbedError::NotRoot`]).
    /// The account is created when missing, and repaired when it differs (one account
    /// per shell, shared by all testbeds and test processes; changes happen under an
    /// exclusive `flock` on `/run/lock/swiftide-ssh-testbed-accounts.lock`):
    ///
    /// - login shell `shell`, also added to `/etc/shells` if missing (Dropbear refuses
    ///   shells not listed there); for [`LoginShell::BusyboxAsh`] a symbolic link
    ///   `/usr/local/lib/swiftide-testbed/ash` to `busybox`;
    /// - password field `*` (no password login, but not locked as `!` would be: OpenSSH
    ///   without PAM refuses locked accounts even for keys);
    /// - home `/home/<account>` (0755) with empty start-up files (`.profile`, `.bashrc`,
    ///   `.zshrc`, `.zshenv`, `.mkshrc`, `.cshrc`, `.tcshrc`, `.login`,
    ///   `.config/fish/config.fish`, ...), so the shells print nothing;
    /// - `~/.ssh` (0700) with `authorized_keys` (0600), owned by the account, holding the
    ///   testbed's authorized client keys (Dropbear only reads this file; sshd still
    ///   uses the testbed's own file). Each line is tagged with the owning test process;
    ///   lines of processes that have exited are removed on the next update.
    ///
    /// [`password_auth`](Self::password_auth) does not help: the account has no password.
    /// With [`escalation`](Self::escalation) the testbed logs in as that rule's account
    /// instead, which gets this login shell.
    ///
    /// Defaults to no dedicated account (see [`Testbed::user`]).
    pub fn login_shell(mut self, shell: LoginShell) -> Self {
        self.login_shell = Some(shell);
        self
    }

    /// Writes `contents` to `path` (relative to the home directory) in the
    /// [login shell](Self::login_shell) account's home, after its start-up files have been
    /// emptied: a `.bashrc` that sleeps before its interactive guard, say. The account is
    /// then one of its own, [`LoginShell::account_name`] followed by `-` and 8 hex digits (a
    /// hash of the files), so that testbeds with other files, or none, never share it.
    /// May be called more than once. Sessions then also miss the `SHLVL=1` the testbed
    /// otherwise gives them, so that Debian's bash reads `~/.bashrc` for commands over SSH as
    /// it does on a real server. With an [escalation](Self::escalation) the files go into
    /// that rule's account, then `swiftide-b-<rule>-<8 hex digits>` (a hash of the shell and
    /// the files).
    ///
    /// Without a login shell or escalation, or with a path that is absolute or contains `..`,
    /// [`start`](Self::start) fails with [`TestbedError::Unsupported`].
    ///
    /// Defaults to no files.
    pub fn home_file(mut self, path: impl Into<PathBuf>, contents: impl Into<Vec<u8>>) -> Self {
        self.home_files.push((path.into(), contents.into()));
        self
    }

    /// The SSH server to run.
    ///
    /// [`Server::Dropbear`] requires root (else [`start`](Self::start) fails with
    /// [`TestbedError::NotRoot`]) and runs
    /// `/usr/sbin/dropbear -F -E -e -m -s -P DIR/dropbear.pid -r DIR/dropbear_ed25519_host_key -p 127.0.0.1:PORT`
    /// (DIR being the testbed's directory) with a fresh ed25519 host key made by `dropbearkey`. Dropbear only reads
    /// `~/.ssh/authorized_keys` and cannot log in as root without editing root's, so it
    /// never logs in as root: it logs in as the [login shell](Self::login_shell) account
    /// if one is set, otherwise as [`UNPRIVILEGED_USER`] (as if
    /// [`unprivileged_user`](Self::unprivileged_user) had been called); the testbed's
    /// keys are added to that account's `~/.ssh/authorized_keys`.
    ///
    /// With Dropbear, [`password_auth`](Self::password_auth) drops `-s` (password logins
    /// allowed), [`client_alive`](Self::client_alive) becomes `-K <interval>` (Dropbear
    /// gives up after 3 unanswered keepalives, whatever `count_max` says),
    /// [`max_sessions`](Self::max_sessions) and [`max_startups`](Self::max_startups) are
    /// ignored, and [`sshd_config_line`](Self::sshd_config_line) makes `start` fail with
    /// [`TestbedError::Unsupported`]. Sessions get the testbed variables
    /// ([`TESTBED_ENV_VAR`], [`TESTBED_ID_ENV_VAR`], `SHLVL=1`) because Dropbear starts
    /// with exactly those in its environment and `-e` passes it on.
    ///
    /// Defaults to [`Server::OpenSsh`].
    pub fn server(mut self, server: Server) -> Self {
        self.server = server;
        self
    }

    /// Shorthand for [`server(Server::Dropbear)`](Self::server).
    pub fn dropbear(self) -> Self {
        self.server(Server::Dropbear)
    }

    /// Whether the server offers the `sftp` subsystem.
    ///
    /// - OpenSSH: `Subsystem sftp internal-sftp`, or no `Subsystem` line at all (sshd
    ///   then refuses the subsystem request).
    /// - Dropbear runs [`DROPBEAR_SFTP_SERVER_PATH`] (`/usr/lib/sftp-server`, compiled
    ///   in; package `openssh-sftp-server`) for every `sftp` subsystem request and has no
    ///   option to turn that off. With `sftp(true)` the file must exist. With
    ///   `sftp(false)` Dropbear runs in a private mount namespace (`unshare --mount
    ///   --propagation private`) in which `/dev/null` is bind-mounted over the SFTP
    ///   server, so the subsystem's command cannot be executed: the channel closes at
    ///   once with exit status 126 (and `sftp` reports "Connection closed").
    ///   The rest of the file system looks the same to sessions.
    ///
    /// Defaults to `true`.
    pub fn sftp(mut self, enabled: bool) -> Self {
        self.sftp = enabled;
        self
    }

    /// What `/bin/sh` is for the server and every session: `shell`'s binary, bind-mounted
    /// over the file `/bin/sh` names (Debian's dash) in a private mount namespace
    /// (`unshare --mount --propagation private`), so that a host whose `/bin/sh` is bash
    /// (Fedora, RHEL, Arch) or BusyBox ash can be tested on this machine. Programs started
    /// as `sh` or `/bin/sh` get that shell (bash then runs in its POSIX mode); the rest of
    /// the file system looks the same to sessions.
    ///
    /// Requires root (else [`start`](Self::start) fails with [`TestbedError::NotRoot`])
    /// and util-linux's `unshare`.
    ///
    /// Defaults to the machine's own `/bin/sh`.
    pub fn bin_sh(mut self, shell: LoginShell) -> Self {
        self.bin_sh = Some(shell);
        self
    }

    /// Log in as an unprivileged account that may escalate by `escalation`'s rule (sudo,
    /// doas or su; see [`Escalation`] for the exact rules), for tests of privilege
    /// escalation. [`Testbed::user`] returns the account, [`Testbed::escalation`] the rule.
    /// Takes precedence over [`unprivileged_user`](Self::unprivileged_user); works with
    /// [`dropbear`](Self::dropbear).
    ///
    /// Requires root (else [`start`](Self::start) fails with [`TestbedError::NotRoot`]) and
    /// the program of the rule (`sudo` and `visudo`, `doas`, or `su`; else
    /// [`TestbedError::ProgramNotFound`], naming `apt-get install -y sudo doas`). Under the
    /// same lock as the [login shell](Self::login_shell) accounts, the testbed creates or
    /// repairs:
    ///
    /// - the account [`Escalation::account_name`]: `swiftide-b-<rule>` with login shell
    ///   `/bin/sh`, or `swiftide-b-<shell>-<rule>` with a [login shell](Self::login_shell)
    ///   (one account per shell and rule, so testbeds with different rules never share
    ///   one); password [`BECOME_PASSWORD`] set with `chpasswd` (a real hash, which sudo
    ///   and su check through PAM), no supplementary groups (no `%sudo` rule applies), home
    ///   `/home/<account>` with empty start-up files and the testbed's keys in
    ///   `~/.ssh/authorized_keys` (tagged with the owning process, as for login shell
    ///   accounts);
    /// - the account [`BECOME_TARGET_USER`] (login shell `/bin/sh`, password
    ///   [`BECOME_TARGET_PASSWORD`]), a non-root user to become: root's password is never
    ///   touched, so `su` tests switch to this account;
    /// - the rule: `/etc/sudoers.d/swiftide-testbed-<account>` (mode 0440, checked with
    ///   `visudo -cf` before it is renamed into place) for the sudo rules, the account's
    ///   lines in the testbed's block of `/etc/doas.conf` (between [`DOAS_BLOCK_BEGIN`] and
    ///   [`DOAS_BLOCK_END`], at the end of the file; other lines are kept; checked with
    ///   `doas -C`, renamed into place) for the doas rules.
    ///
    /// [`password_auth`](Self::password_auth) then accepts [`BECOME_PASSWORD`] too.
    ///
    /// Defaults to none (no escalation account).
    pub fn escalation(mut self, escalation: Escalation) -> Self {
        self.escalation = Some(escalation);
        self
    }

    /// Sets up the keys, accounts and configuration, starts sshd and waits until it
    /// sends its SSH banner.
    ///
    /// # Errors
    ///
    /// [`TestbedError::SshdNotFound`] without an sshd binary,
    /// [`TestbedError::ProgramNotFound`] without Dropbear, `dropbearkey`, the login
    /// shell, BusyBox, Dropbear's SFTP server, sudo, doas or su when they are needed,
    /// [`TestbedError::NotRoot`] for [`TestbedBuilder::unprivileged_user`],
    /// [`TestbedBuilder::login_shell`], [`TestbedBuilder::escalation`],
    /// [`TestbedBuilder::dropbear`], [`TestbedBuilder::bin_sh`] or
    /// [`TestbedBuilder::network_namespace`] without root,
    /// [`TestbedError::Unsupported`] for `sshd_config` lines with Dropbear,
    /// [`TestbedError::MissingPrivsepDir`] when `/run/sshd` is missing and cannot be
    /// created, [`TestbedError::StartFailed`] (with sshd's log) when sshd exits or does
    /// not answer within 10 s, [`TestbedError::Command`]/[`TestbedError::Io`] when a
    /// helper command or file operation fails.
    pub fn start(self) -> Result<Testbed, TestbedError> {
        Testbed::launch_new(self)
    }
}

/// The files of a testbed.
#[derive(Debug)]
struct Paths {
    config: PathBuf,
    log: PathBuf,
    stderr: PathBuf,
    pid: PathBuf,
    host_key: PathBuf,
    authorized_keys: PathBuf,
    known_hosts: PathBuf,
    client_key: PathBuf,
    encrypted_key: PathBuf,
    unauthorized_key: PathBuf,
}

impl Paths {
    fn new(dir: &Path, server: Server) -> Self {
        let (log, pid, host_key) = match server {
            Server::OpenSsh => ("sshd.log", "sshd.pid", "ssh_host_ed25519_key"),
            // Dropbear logs to its standard error, which goes to the log file.
            Server::Dropbear => ("dropbear.log", "dropbear.pid", "dropbear_ed25519_host_key"),
        };
        Self {
            config: dir.join("sshd_config"),
            log: dir.join(log),
            stderr: dir.join("sshd.stderr"),
            pid: dir.join(pid),
            host_key: dir.join(host_key),
            authorized_keys: dir.join("authorized_keys"),
            known_hosts: dir.join("known_hosts"),
            client_key: dir.join("id_ed25519"),
            encrypted_key: dir.join("id_ed25519_encrypted"),
            unauthorized_key: dir.join("id_ed25519_unauthorized"),
        }
    }
}

/// A running sshd listener and its watchdog. Dropping it kills the listener and every
/// process below it.
#[derive(Debug)]
struct Running {
    child: Child,
    watchdog: Option<Child>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            process::stop_watchdog(watchdog);
        }
        // A listener that already exited (and was reaped) must not be signalled: its
        // pid may have been reused.
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            process::kill_tree(&mut self.child);
        }
    }
}

/// Why one start attempt failed.
enum LaunchError {
    /// sshd could not bind the port.
    AddrInUse(TestbedError),
    Other(TestbedError),
}

/// A real OpenSSH server on loopback, for tests. See the [crate documentation](crate).
///
/// Dropping it kills sshd, every process still running in one of its sessions (found by
/// [`TESTBED_ID_ENV_VAR`] in their environment, so this includes background commands
/// whose connection is gone), and removes its directories. Best effort, never panics.
#[derive(Debug)]
pub struct Testbed {
    settings: TestbedBuilder,
    id: String,
    /// The server binary (sshd or dropbear).
    sshd: PathBuf,
    port: u16,
    user: String,
    root_login: bool,
    /// The login shell of `user`, as in `/etc/passwd`, with `login_shell`.
    login_shell_path: Option<PathBuf>,
    /// Dropbear without SFTP: the file to hide behind `/dev/null`.
    hide_sftp_server: Option<PathBuf>,
    /// [`TestbedBuilder::bin_sh`]: the shell's binary and the file `/bin/sh` names, which
    /// the shell is bind-mounted over.
    bin_sh: Option<(PathBuf, PathBuf)>,
    host_public_key: String,
    paths: Paths,
    running: Option<Running>,
    pid: u32,
    /// The processes the last [`Testbed::freeze`] stopped, for [`Testbed::thaw`].
    frozen: Mutex<Vec<u32>>,
    scratch: TempDir,
    dir: TempDir,
    /// Dropped after sshd was killed (in `Drop::drop`).
    network: Option<netns::Network>,
}

impl Testbed {
    /// Starts a testbed with the default settings (`Testbed::builder().start()`).
    ///
    /// # Errors
    ///
    /// See [`TestbedBuilder::start`].
    pub fn start() -> Result<Testbed, TestbedError> {
        Self::builder().start()
    }

    /// A builder for a testbed with non-default settings.
    pub fn builder() -> TestbedBuilder {
        TestbedBuilder::default()
    }

    /// A unique name of this testbed (the name of its [directory](Testbed::dir)); every
    /// session's environment has `SWIFTIDE_SSH_TESTBED_ID=<id>` (see
    /// [`TESTBED_ID_ENV_VAR`]).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The address to connect to, as text (`"127.0.0.1"` by default; `10.213.<n>.2` with
    /// a [network namespace](TestbedBuilder::network_namespace)).
    pub fn host(&self) -> String {
        self.settings.listen_address.to_string()
    }

    /// The port sshd listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The user to log in as: the [escalation](TestbedBuilder::escalation) account
    /// (`swiftide-b-...`) if a rule was chosen, otherwise the [login
    /// shell](TestbedBuilder::login_shell) account (`swiftide-sh-<shell>`) if one was
    /// chosen, otherwise [`UNPRIVILEGED_USER`] with
    /// [`unprivileged_user`](TestbedBuilder::unprivileged_user) or
    /// [Dropbear](TestbedBuilder::dropbear), otherwise the current user.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The escalation rule chosen with [`TestbedBuilder::escalation`], if any.
    pub fn escalation(&self) -> Option<Escalation> {
        self.settings.escalation
    }

    /// Whether [`Testbed::user`] is root.
    pub fn is_root_login(&self) -> bool {
        self.root_login
    }

    /// The login shell chosen with [`TestbedBuilder::login_shell`], if any.
    pub fn login_shell(&self) -> Option<&LoginShell> {
        self.settings.login_shell.as_ref()
    }

    /// The login shell of [`Testbed::user`] as written in `/etc/passwd` (for
    /// [`LoginShell::BusyboxAsh`] the `ash` link), if a login shell was chosen.
    pub fn login_shell_path(&self) -> Option<&Path> {
        self.login_shell_path.as_deref()
    }

    /// The SSH server the testbed runs.
    pub fn server(&self) -> Server {
        self.settings.server
    }

    /// Whether the server offers the `sftp` subsystem (see [`TestbedBuilder::sftp`]).
    pub fn sftp_enabled(&self) -> bool {
        self.settings.sftp
    }

    /// An unencrypted ed25519 client key (OpenSSH format, mode 0600, `.pub` next to it)
    /// that is authorized for [`Testbed::user`].
    pub fn private_key_path(&self) -> &Path {
        &self.paths.client_key
    }

    /// An ed25519 client key encrypted with [`KEY_PASSPHRASE`] (bcrypt-pbkdf with 4
    /// rounds rather than ssh-keygen's default 16, to keep unoptimised clients fast),
    /// authorized for [`Testbed::user`].
    pub fn encrypted_private_key_path(&self) -> &Path {
        &self.paths.encrypted_key
    }

    /// A valid, unencrypted ed25519 client key that is *not* authorized (for
    /// authentication failure tests).
    pub fn unauthorized_private_key_path(&self) -> &Path {
        &self.paths.unauthorized_key
    }

    /// A `known_hosts` file with the single line `[127.0.0.1]:PORT ssh-ed25519 AAAA...`
    /// (OpenSSH format; without brackets if the port is 22).
    pub fn known_hosts_path(&self) -> &Path {
        &self.paths.known_hosts
    }

    /// The host's public key as `ssh-ed25519 AAAA...` (no comment). It stays the same
    /// across [`Testbed::restart`].
    pub fn host_public_key(&self) -> &str {
        &self.host_public_key
    }

    /// The testbed's private directory (keys, `sshd_config`, `sshd.log`, ...).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A fresh, empty directory under `/tmp`, owned by and writable for
    /// [`Testbed::user`]; removed when the testbed is dropped. Put remote files here.
    pub fn scratch_dir(&self) -> &Path {
        self.scratch.path()
    }

    /// The contents of sshd's log file (`LogLevel VERBOSE`, appended to across
    /// restarts), with `\n` line ends. For Dropbear: what it logged to its standard
    /// error (`dropbear.log` in the [directory](Testbed::dir)).
    pub fn sshd_log(&self) -> String {
        read_from(&self.paths.log, 0)
    }

    /// The pid of the sshd (or Dropbear) listener (of the last one, once stopped).
    pub fn sshd_pid(&self) -> u32 {
        self.pid
    }

    /// The OpenSSH client, ready to run `remote_command` on the testbed as
    /// [`Testbed::user`] with [`Testbed::private_key_path`], strict host key checking
    /// against [`Testbed::known_hosts_path`], batch mode (no prompts) and no user or
    /// system `ssh_config`. Standard input defaults to `/dev/null`; override it with
    /// [`Command::stdin`] as needed.
    ///
    /// The arguments end with `-- user@host remote_command`, so arguments appended with
    /// [`Command::arg`] extend the remote command; to pass more ssh options, start a
    /// new `Command::new("ssh")` with your options followed by this command's
    /// [`get_args`](Command::get_args).
    ///
    /// This lets tests inspect the server independently of the code under test.
    pub fn ssh_command(&self, remote_command: &str) -> Command {
        system::ssh_client(
            &self.paths.client_key,
            self.port,
            &self.paths.known_hosts,
            &["KexAlgorithms=curve25519-sha256"],
            &format!("{}@{}", self.user, self.host()),
            remote_command,
        )
    }

    /// Runs [`Testbed::ssh_command`] and returns its output, whatever its exit status
    /// (ssh exits with 255 on connection or authentication errors, otherwise with the
    /// remote command's status).
    ///
    /// # Errors
    ///
    /// [`TestbedError::Io`] if `ssh` cannot be run.
    pub fn run(&self, remote_command: &str) -> Result<Output, TestbedError> {
        self.ssh_command(remote_command)
            .output()
            .map_err(|e| TestbedError::io("running ssh (is openssh-client installed?)", e))
    }

    /// Kills (SIGKILL) the listener and every process below it — the per-connection
    /// sshd processes and the commands they run — and waits for them, so that existing
    /// connections drop. Does nothing if already stopped.
    pub fn stop(&mut self) {
        self.running = None;
        self.frozen
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Starts sshd again (stopping it first if it runs) on the same port, with the same
    /// host key, users and configuration.
    ///
    /// # Errors
    ///
    /// [`TestbedError::StartFailed`] (with sshd's log) if sshd does not come up, e.g.
    /// because another process took the port meanwhile (3 attempts, 200 ms apart).
    pub fn restart(&mut self) -> Result<(), TestbedError> {
        self.stop();
        self.launch(false)
    }

    /// Makes the server a silent peer: SIGSTOP the listener and every per-connection
    /// sshd process, and wait (up to 2 s) until they are stopped. Open connections stay
    /// open but get no answers; new connections are accepted by the kernel but never see a
    /// banner. Undo with [`Testbed::thaw`].
    ///
    /// # Errors
    ///
    /// [`TestbedError::NotRunning`] after [`Testbed::stop`];
    /// [`TestbedError::Command`] if the listener cannot be signalled.
    pub fn freeze(&self) -> Result<(), TestbedError> {
        let pid = self.running_pid()?;
        process::signal("STOP", &[pid])?;
        // The listener must really be stopped before its children are collected, or it
        // could still fork one that escapes the scan.
        process::wait_stopped(&[pid], FREEZE_TIMEOUT);
        let children = process::stop_server_descendants(pid, self.server().name());
        process::wait_stopped(&children, FREEZE_TIMEOUT);
        // Remembered for thaw(): a process that was a server process (a fork) when
        // scanned may have exec'd the session's command (and changed its name) before
        // the signal arrived; thaw() would no longer recognise it.
        self.frozen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(children);
        Ok(())
    }

    /// Resumes (SIGCONT) the processes stopped by [`Testbed::freeze`].
    ///
    /// # Errors
    ///
    /// [`TestbedError::NotRunning`] after [`Testbed::stop`];
    /// [`TestbedError::Command`] if the listener cannot be signalled.
    pub fn thaw(&self) -> Result<(), TestbedError> {
        let pid = self.running_pid()?;
        let mut pids: BTreeSet<u32> =
            std::mem::take(&mut *self.frozen.lock().unwrap_or_else(PoisonError::into_inner))
                .into_iter()
                .collect();
        pids.extend(process::server_descendants(pid, self.server().name()));
        let pids: Vec<u32> = pids.into_iter().filter(|&p| process::is_alive(p)).collect();
        // Best effort for connection processes: they may exit at any time.
        let _ = process::signal("CONT", &pids);
        process::signal("CONT", &[pid])
    }

    /// Cuts the host off the network, silently: from now on every packet between it and
    /// the rest of the machine is dropped, in both directions. Established connections
    /// see no FIN or RST (only keepalives and timeouts can tell), and new connection
    /// attempts hang (no refusal, no "no route to host"). sshd and the commands keep
    /// running. Undo with [`Testbed::restore_network`]; calling it twice is harmless.
    ///
    /// Only for testbeds with a [network namespace](TestbedBuilder::network_namespace).
    /// Technically, the namespace's end of the veth pair goes down; the root namespace's end
    /// stays up without a carrier, keeping its route, so nothing leaves the machine.
    ///
    /// # Errors
    ///
    /// [`TestbedError::NoNetworkNamespace`] for a testbed without one;
    /// [`TestbedError::Command`] if `ip` fails.
    pub fn cut_network(&self) -> Result<(), TestbedError> {
        self.network()?.cut()
    }

    /// Reconnects a host cut off with [`Testbed::cut_network`] and returns once the link is
    /// up again (packets flow; connections that both ends still hold resume). Harmless
    /// when the network is not cut.
    ///
    /// # Errors
    ///
    /// [`TestbedError::NoNetworkNamespace`] for a testbed without one;
    /// [`TestbedError::Command`] if `ip` fails; [`TestbedError::Io`] if the link does not
    /// come up within 5 s.
    pub fn restore_network(&self) -> Result<(), TestbedError> {
        self.network()?.restore()
    }

    /// Whether the network is cut ([`Testbed::cut_network`] without a later
    /// [`Testbed::restore_network`]). Always `false` without a network namespace.
    pub fn is_network_cut(&self) -> bool {
        self.network.as_ref().is_some_and(netns::Network::is_cut)
    }

    /// The name of the testbed's network namespace (`swiftide-tb-<n>`), if it has one;
    /// for `ip netns exec <name> ...` and `ip -n <name> ...`.
    pub fn network_namespace(&self) -> Option<&str> {
        self.network.as_ref().map(netns::Network::namespace)
    }

    /// The root namespace's end of the veth pair (`swtb<n>h`), if the testbed has a
    /// network namespace.
    pub fn host_interface(&self) -> Option<&str> {
        self.network.as_ref().map(netns::Network::host_interface)
    }

    /// The address of the root namespace's end of the veth pair (`10.213.<n>.1`): where
    /// the host sees connections from the test come from. `None` without a network
    /// namespace.
    pub fn host_side_address(&self) -> Option<Ipv4Addr> {
        self.network.as_ref().map(netns::Network::host_side_address)
    }

    fn network(&self) -> Result<&netns::Network, TestbedError> {
        self.network
            .as_ref()
            .ok_or(TestbedError::NoNetworkNamespace)
    }

    /// The pids of the living per-connection sshd processes: the sshd processes below
    /// the listener (found through the parent pids in `/proc/*/stat`, recursively,
    /// including the privilege-separated children). Empty when stopped. For Dropbear:
    /// the `dropbear` processes below the listener (one per connection).
    pub fn connection_pids(&self) -> Vec<u32> {
        match &self.running {
            Some(running) => process::server_descendants(running.child.id(), self.server().name()),
            None => Vec::new(),
        }
    }

    /// `SWIFTIDE_SSH_TESTBED_ID=<id>`
    fn env_entry(&self) -> String {
        format!("{TESTBED_ID_ENV_VAR}={}", self.id)
    }

    fn running_pid(&self) -> Result<u32, TestbedError> {
        self.running
            .as_ref()
            .map(|running| running.child.id())
            .ok_or(TestbedError::NotRunning)
    }

    fn launch_new(mut settings: TestbedBuilder) -> Result<Testbed, TestbedError> {
        let dropbear = settings.server == Server::Dropbear;
        let sshd = if dropbear {
            dropbear::dropbear_path()?
        } else {
            sshd_path()?
        };
        let uid = system::effective_uid()?;
        let root_only = [
            (
                settings.network_namespace,
                "running sshd in a network namespace (network_namespace(true))".to_owned(),
            ),
            (
                dropbear,
                "running Dropbear (it logs in as a dedicated account)".to_owned(),
            ),
            (
                settings.login_shell.is_some(),
                "logging in as a login shell account (login_shell(..))".to_owned(),
            ),
            (
                settings.bin_sh.is_some(),
                "replacing /bin/sh for the server (bin_sh(..))".to_owned(),
            ),
            (
                settings.escalation.is_some(),
                "logging in as an escalation account (escalation(..))".to_owned(),
            ),
        ];
        if uid != 0
            && let Some((_, what)) = root_only.into_iter().find(|(needed, _)| *needed)
        {
            return Err(TestbedError::NotRoot { what });
        }
        if dropbear && !settings.extra_lines.is_empty() {
            return Err(TestbedError::Unsupported {
                what: "sshd_config lines (sshd_config_line) with Dropbear".to_owned(),
            });
        }
        let hide_sftp_server = match (dropbear, settings.sftp) {
            (false, _) => None,
            (true, true) => {
                if dropbear::sftp_server().is_none() {
                    return Err(dropbear::sftp_server_missing());
                }
                None
            }
            // Nothing to hide if it does not exist.
            (true, false) => dropbear::sftp_server(),
        };
        let bin_sh = settings
            .bin_sh
            .as_ref()
            .map(|shell| {
                let target = fs::canonicalize("/bin/sh")
                    .map_err(|e| TestbedError::io("resolving /bin/sh", e))?;
                Ok::<_, TestbedError>((shell.resolve()?, target))
            })
            .transpose()?;
        if uid == 0 && !dropbear {
            ensure_privsep_dir()?;
        }
        let keys = system::client_keys()?;
        let authorized_keys = [keys.plain.public.clone(), keys.encrypted.public.clone()];
        if !settings.home_files.is_empty() {
            if settings.login_shell.is_none() && settings.escalation.is_none() {
                return Err(TestbedError::Unsupported {
                    what: "home files (home_file) without a login shell or escalation account"
                        .to_owned(),
                });
            }
            if let Some((path, _)) = settings.home_files.iter().find(|(path, _)| {
                path.is_absolute()
                    || path
                        .components()
                        .any(|c| matches!(c, std::path::Component::ParentDir))
            }) {
                return Err(TestbedError::Unsupported {
                    what: format!("the home file {} (outside the home)", path.display()),
                });
            }
        }
        let (user, root_login, login_shell_path) = if let Some(escalation) = settings.escalation {
            let shell_path = settings
                .login_shell
                .as_ref()
                .map(LoginShell::resolve)
                .transpose()?;
            let (name, user_uid) = escalation::ensure(
                escalation,
                settings.login_shell.as_ref(),
                shell_path.as_deref().unwrap_or(Path::new("/bin/sh")),
                &authorized_keys,
                &settings.home_files,
            )?;
            (name, user_uid == 0, shell_path)
        } else if let Some(shell) = &settings.login_shell {
            let path = shell.resolve()?;
            let name = shells::account_with_files(shell, &settings.home_files);
            let user_uid =
                shells::ensure_login_account(&name, &path, &authorized_keys, &settings.home_files)?;
            (name, user_uid == 0, Some(path))
        } else if settings.unprivileged || dropbear {
            if uid != 0 {
                return Err(TestbedError::NotRoot {
                    what: format!(
                        "logging in as the unprivileged user {UNPRIVILEGED_USER} instead of \
                         the current user"
                    ),
                });
            }
            let user_uid = system::ensure_unprivileged_user()?;
            if dropbear {
                shells::ensure_home_keys(UNPRIVILEGED_USER, &authorized_keys)?;
            }
            (UNPRIVILEGED_USER.to_owned(), user_uid == 0, None)
        } else {
            (system::user_name(uid)?, uid == 0, None)
        };

        let dir = tempfile::Builder::new()
            .prefix("swiftide-ssh-testbed-")
            .tempdir_in("/tmp")
            .map_err(|e| TestbedError::io("creating the testbed directory in /tmp", e))?;
        // The login user must be able to read authorized_keys (sshd reads it with the
        // user's privileges).
        system::chmod(dir.path(), 0o755)?;
        let paths = Paths::new(dir.path(), settings.server);
        let id = dir
            .path()
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();

        let host_public_key = if dropbear {
            dropbear::generate_host_key(&paths.host_key)?
        } else {
            let host_key = system::generate_key(&paths.host_key, "swiftide-ssh-testbed-host")?;
            host_key
                .public
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        };
        keys.plain.write(&paths.client_key)?;
        keys.encrypted.write(&paths.encrypted_key)?;
        keys.unauthorized.write(&paths.unauthorized_key)?;
        let authorized = format!("{}\n{}\n", keys.plain.public, keys.encrypted.public);
        system::write_file(&paths.authorized_keys, authorized.as_bytes(), 0o644)?;
        // In case the umask made it stricter.
        system::chmod(&paths.authorized_keys, 0o644)?;

        let scratch = tempfile::Builder::new()
            .prefix("swiftide-ssh-scratch-")
            .tempdir_in("/tmp")
            .map_err(|e| TestbedError::io("creating the scratch directory in /tmp", e))?;
        system::chmod(scratch.path(), 0o755)?;
        if uid == 0 && user != "root" {
            system::chown(scratch.path(), &user)?;
        }

        let network = if settings.network_namespace {
            let network = netns::Network::create()?;
            settings.listen_address = IpAddr::V4(network.inner_address());
            if settings.port.is_none() {
                // The namespace is private: the standard port is free.
                settings.port = Some(22);
            }
            Some(network)
        } else {
            None
        };

        let mut testbed = Testbed {
            port: settings.port.unwrap_or(0),
            settings,
            id,
            sshd,
            user,
            root_login,
            login_shell_path,
            hide_sftp_server,
            bin_sh,
            host_public_key,
            paths,
            running: None,
            pid: 0,
            frozen: Mutex::new(Vec::new()),
            scratch,
            dir,
            network,
        };
        let ephemeral = testbed.settings.port.is_none();
        testbed.launch(ephemeral)?;
        Ok(testbed)
    }

    /// Writes the configuration and starts sshd, on a new ephemeral port (retrying on
    /// bind failures) or on `self.port`.
    fn launch(&mut self, ephemeral: bool) -> Result<(), TestbedError> {
        let attempts = if ephemeral {
            PORT_ATTEMPTS
        } else {
            RESTART_ATTEMPTS
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            if ephemeral {
                self.port = free_port(self.settings.listen_address)?;
            }
            if self.server() == Server::OpenSsh {
                self.write_config()?;
            }
            match self.spawn_and_wait() {
                Ok(running) => {
                    self.pid = running.child.id();
                    self.running = Some(running);
                    return self.write_known_hosts();
                }
                Err(LaunchError::AddrInUse(_)) if attempt < attempts => {
                    if !ephemeral {
                        thread::sleep(Duration::from_millis(200));
                    }
                }
                Err(LaunchError::AddrInUse(e) | LaunchError::Other(e)) => return Err(e),
            }
        }
    }

    fn write_config(&self) -> Result<(), TestbedError> {
        let text = config::render(&config::ConfigParams {
            port: self.port,
            listen_address: self.host(),
            host_key: &self.paths.host_key.to_string_lossy(),
            pid_file: &self.paths.pid.to_string_lossy(),
            authorized_keys: &self.paths.authorized_keys.to_string_lossy(),
            password_auth: self.settings.password_auth,
            max_sessions: self.settings.max_sessions,
            max_startups: &self.settings.max_startups,
            user: &self.user,
            testbed_id: &self.id,
            quiet_bashrc: self.settings.home_files.is_empty(),
            sftp: self.settings.sftp,
            client_alive: self.settings.client_alive,
            extra_lines: &self.settings.extra_lines,
        });
        system::write_file(&self.paths.config, text.as_bytes(), 0o644)
    }

    fn write_known_hosts(&self) -> Result<(), TestbedError> {
        let host = self.host();
        let pattern = if self.port == 22 {
            host
        } else {
            format!("[{host}]:{}", self.port)
        };
        let line = format!("{pattern} {}\n", self.host_public_key);
        system::write_file(&self.paths.known_hosts, line.as_bytes(), 0o644)
    }

    /// Log output (sshd.log and sshd's stderr) written after the given offsets.
    fn log_since(&self, log_offset: u64, stderr_offset: u64) -> String {
        let mut text = read_from(&self.paths.log, log_offset);
        let stderr = read_from(&self.paths.stderr, stderr_offset);
        if !stderr.trim().is_empty() {
            text.push_str("\n[sshd stderr]\n");
            text.push_str(&stderr);
        }
        text
    }

    /// Starts sshd once and waits until it is ready.
    fn spawn_and_wait(&self) -> Result<Running, LaunchError> {
        let log_offset = file_len(&self.paths.log);
        let stderr_offset = file_len(&self.paths.stderr);
        let stderr = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.paths.stderr)
            .map_err(|e| {
                LaunchError::Other(TestbedError::io(
                    format!("opening {}", self.paths.stderr.display()),
                    e,
                ))
            })?;
        let addr = SocketAddr::new(self.settings.listen_address, self.port);
        let (program, args) = match self.server() {
            Server::OpenSsh => (
                self.sshd.clone(),
                vec![
                    "-D".into(),
                    "-e".into(),
                    "-f".into(),
                    self.paths.config.clone().into_os_string(),
                    "-E".into(),
                    self.paths.log.clone().into_os_string(),
                ],
            ),
            Server::Dropbear => {
                let (program, args) = dropbear::program_and_args(&dropbear::DropbearParams {
                    dropbear: &self.sshd,
                    address: addr,
                    host_key: &self.paths.host_key,
                    pid_file: &self.paths.pid,
                    password_auth: self.settings.password_auth,
                    keepalive: self
                        .settings
                        .client_alive
                        .filter(|&(interval, count)| interval > 0 && count > 0)
                        .map(|(interval, _)| interval),
                    hide_sftp_server: self.hide_sftp_server.as_deref(),
                });
                (program, args.into_iter().map(Into::into).collect())
            }
        };
        let (program, args) = match &self.bin_sh {
            None => (program, args),
            Some((shell, target)) => {
                let mut all: Vec<std::ffi::OsString> =
                    system::private_mount_namespace_args(BIN_SH_SCRIPT)
                        .into_iter()
                        .map(Into::into)
                        .collect();
                all.extend([shell, target, &program].map(|p| p.clone().into_os_string()));
                all.extend(args);
                (system::unshare_path(), all)
            }
        };
        let mut command = match &self.network {
            Some(network) => network.exec_command(&program),
            None => Command::new(&program),
        };
        command.args(&args);
        let stderr = if self.server() == Server::Dropbear {
            // Dropbear logs to its standard error (-E): straight into the log file.
            command.env_clear().envs(dropbear::environment(
                &self.id,
                self.settings.home_files.is_empty(),
            ));
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.paths.log)
                .map_err(|e| {
                    LaunchError::Other(TestbedError::io(
                        format!("opening {}", self.paths.log.display()),
                        e,
                    ))
                })?
        } else {
            stderr
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| {
                LaunchError::Other(TestbedError::io(
                    format!("starting {}", program.display()),
                    e,
                ))
            })?;
        let watchdog = process::spawn_watchdog(
            child.id(),
            &self.env_entry(),
            &[self.dir.path(), self.scratch.path()],
        );
        let mut running = Running { child, watchdog };
        let name = self.server().name();
        let ready_line = match self.server() {
            Server::OpenSsh => "Server listening on",
            Server::Dropbear => dropbear::READY_LINE,
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match running.child.try_wait() {
                Ok(None) => {}
                Ok(Some(status)) => {
                    let log = self.log_since(log_offset, stderr_offset);
                    return Err(classify_exit(name, &status.to_string(), log));
                }
                Err(e) => {
                    return Err(LaunchError::Other(TestbedError::io(
                        format!("waiting for {name}"),
                        e,
                    )));
                }
            }
            // "Server listening on" (Dropbear: "Not backgrounding", logged only once its
            // sockets are bound) proves that *this* server bound the port (a banner alone
            // could come from another process that grabbed it).
            if read_from(&self.paths.log, log_offset).contains(ready_line) && probe_banner(addr) {
                break;
            }
            if Instant::now() > deadline {
                drop(running);
                return Err(LaunchError::Other(TestbedError::StartFailed {
                    reason: format!(
                        "{name} did not send its banner on {addr} within {} s",
                        READY_TIMEOUT.as_secs()
                    ),
                    log: self.log_since(log_offset, stderr_offset),
                }));
            }
            thread::sleep(Duration::from_millis(10));
        }
        // Let the probe's per-connection process exit, so that connection_pids() starts
        // out empty.
        let pid = running.child.id();
        let deadline = Instant::now() + Duration::from_secs(2);
        while !process::server_descendants(pid, self.server().name()).is_empty()
            && Instant::now() < deadline
        {
            thread::sleep(Duration::from_millis(5));
        }
        Ok(running)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.stop();
        // Commands that sessions left behind (reparented away from sshd).
        if !self.id.is_empty() {
            process::kill_by_env(&self.env_entry());
        }
        // The temporary directories remove themselves (errors ignored).
    }
}

/// Turns an early sshd exit into an error.
fn classify_exit(name: &str, status: &str, log: String) -> LaunchError {
    if log.contains("Address already in use") {
        LaunchError::AddrInUse(TestbedError::StartFailed {
            reason: format!("{name} could not bind its port ({status})"),
            log,
        })
    } else if log.contains("Missing privilege separation directory") {
        LaunchError::Other(TestbedError::MissingPrivsepDir {
            path: PathBuf::from(PRIVSEP_DIR),
        })
    } else {
        LaunchError::Other(TestbedError::StartFailed {
            reason: format!("{name} exited with {status}"),
            log,
        })
    }
}

/// The sshd binary: [`SSHD_PATH_ENV_VAR`] or [`DEFAULT_SSHD_PATH`], made absolute (sshd
/// refuses to run from a relative path).
fn sshd_path() -> Result<PathBuf, TestbedError> {
    let path = std::env::var_os(SSHD_PATH_ENV_VAR)
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_SSHD_PATH), PathBuf::from);
    if !path.is_file() {
        return Err(TestbedError::SshdNotFound { path });
    }
    if path.is_absolute() {
        Ok(path)
    } else {
        fs::canonicalize(&path)
            .map_err(|e| TestbedError::io(format!("resolving {}", path.display()), e))
    }
}

/// Creates `/run/sshd` (root only) if missing.
fn ensure_privsep_dir() -> Result<(), TestbedError> {
    let path = Path::new(PRIVSEP_DIR);
    if path.is_dir() {
        return Ok(());
    }
    let missing = || TestbedError::MissingPrivsepDir {
        path: path.to_owned(),
    };
    match fs::create_dir_all(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => return Err(missing()),
    }
    system::chmod(path, 0o755).map_err(|_| missing())?;
    if path.is_dir() {
        Ok(())
    } else {
        Err(missing())
    }
}

/// A port that is free right now on `addr`.
fn free_port(addr: IpAddr) -> Result<u16, TestbedError> {
    let listener = TcpListener::bind(SocketAddr::new(addr, 0))
        .map_err(|e| TestbedError::io(format!("binding {addr}:0 to find a free port"), e))?;
    let port = listener
        .local_addr()
        .map_err(|e| TestbedError::io("reading the bound port", e))?
        .port();
    Ok(port)
}

/// Connects and waits (up to about 1 s) for the `SSH-2.0-` banner.
fn probe_banner(addr: SocketAddr) -> bool {
    probe_banner_within(addr, Duration::from_secs(1))
}

/// Connects and waits for the `SSH-2.0-` banner; the connect and each read are bounded
/// by `timeout`.
pub(crate) fn probe_banner_within(addr: SocketAddr, timeout: Duration) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    if stream.set_read_timeout(Some(timeout)).is_err() {
        return false;
    }
    let mut received = Vec::new();
    let mut chunk = [0u8; 256];
    while received.len() < 8192 {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                received.extend_from_slice(chunk.get(..n).unwrap_or_default());
                if received.windows(8).any(|w| w == b"SSH-2.0-") {
                    return true;
                }
            }
        }
    }
    false
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map_or(0, |m| m.len())
}

/// The contents of a file from `offset` on, lossily decoded, with sshd's `\r\n` line
/// ends (it writes those when logging to "stderr") turned into `\n`; empty if
/// unreadable.
fn read_from(path: &Path, offset: u64) -> String {
    let Ok(bytes) = fs::read(path) else {
        return String::new();
    };
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    String::from_utf8_lossy(bytes.get(start..).unwrap_or_default()).replace("\r\n", "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn testbed_is_send_and_sync() {
        assert_send_sync::<Testbed>();
        assert_send_sync::<TestbedError>();
    }

    #[test]
    fn watchdog_kills_sshd_when_the_test_process_goes_away() {
        let mut testbed = Testbed::start().unwrap();
        let mut ssh = testbed
            .ssh_command("echo started; sleep 30")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 8];
        ssh.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
        assert_eq!(&first, b"started\n");
        let listener = testbed.sshd_pid();
        let connections = testbed.connection_pids();
        assert!(!connections.is_empty());
        // A background command whose session is over: no longer below the listener.
        let output = testbed
            .run("sleep 60 >/dev/null 2>&1 </dev/null & echo $!")
            .unwrap();
        let orphan: u32 = String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .unwrap();
        assert!(process::is_alive(orphan));

        // Simulate the test process dying: its end of the watchdog's pipe closes.
        let running = testbed.running.as_mut().unwrap();
        process::trigger_watchdog(running.watchdog.take().unwrap());
        process::wait_gone(&connections, Duration::from_secs(5));
        let status = ssh.wait().unwrap();
        assert!(!status.success());
        assert!(connections.iter().all(|&pid| !process::is_alive(pid)));
        process::wait_gone(&[orphan], Duration::from_secs(5));
        assert!(!process::is_alive(orphan));
        // ...and removes the directories.
        assert!(!testbed.dir().exists());
        assert!(!testbed.scratch_dir().exists());
        // The listener was killed too (it is a zombie until reaped by stop()).
        assert!(!process::is_alive(listener));
        testbed.stop();
    }

    #[test]
    fn missing_sshd_is_reported_with_a_hint() {
        let err = TestbedError::SshdNotFound {
            path: PathBuf::from("/nonexistent/sshd"),
        };
        let message = err.to_string();
        assert!(message.contains("/nonexistent/sshd"));
        assert!(message.contains("apt-get install -y openssh-server"));
    }
}
