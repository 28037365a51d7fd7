//! `swiftide-ssh-mcp`: an MCP server on stdio whose tools run commands and file operations on
//! one remote host over pooled SSH connections. This crate is the command line only: it
//! parses the flags (clap; every flag can also come from a `SWIFTIDE_SSH_*` environment
//! variable), builds the executor, and serves
//! `swiftide_ssh_executor::adapters::mcp::SshMcpServer` (cargo feature `mcp` of the library,
//! for embedding the server in a program of your own).
//!
//! ```sh
//! cargo install swiftide-ssh-mcp
//! swiftide-ssh-mcp --help
//! ```
//!
//! Against the testbed: start a throwaway sshd in one terminal,
//!
//! ```sh
//! cargo run --ignore-rust-version -p swiftide-ssh-testbed --example serve
//! ```
//!
//! which prints the flags for it (`mcp --host 127.0.0.1 --port ... --user ... --identity
//! .../id_ed25519 --known-hosts .../known_hosts`), then run the server with them, e.g. under
//! the MCP inspector or any MCP client:
//!
//! ```sh
//! cargo run --ignore-rust-version -p swiftide-ssh-mcp -- \
//!     --host 127.0.0.1 --port 40123 --user root \
//!     --identity /tmp/.tmpXXXX/id_ed25519 --known-hosts /tmp/.tmpXXXX/known_hosts --root /tmp
//! ```
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Args, CommandFactory, Parser, ValueEnum, builder::BoolishValueParser};
use swiftide_ssh_executor::{
    HostKeyPolicy, SshExecutor, SshExecutorBuilder,
    adapters::mcp::{ServerOptions, SshMcpServer, serve},
    audit::AuditTrail,
    flags::AuditArgs,
};

/// The default command timeout, in seconds.
const DEFAULT_TIMEOUT_SECS: u64 = 600;
/// The default `--max-output-bytes`.
const DEFAULT_MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// The default `--job-retention-days`, the library's `job_retention`.
const DEFAULT_JOB_RETENTION_DAYS: u64 = 7;

/// An MCP server (stdio) that runs commands and file operations on one remote host over
/// pooled SSH connections.
///
/// Every option can also be set through the environment variable shown with it (MCP hosts
/// often pass settings that way); a flag on the command line wins over the variable.
/// Privilege escalation (the --become flags) is the operator's: no tool argument changes
/// it.
#[derive(Debug, Parser)]
#[command(name = "swiftide-ssh-mcp", version)]
#[command(group(
    clap::ArgGroup::new("destination")
        .required(true)
        .args(["host", "alias", "ssh_config_alias"])
))]
struct Cli {
    #[command(flatten)]
    destination: Destination,
    #[command(flatten)]
    auth: Auth,
    // Privilege escalation (Ansible's become), chosen by whoever starts the server: no tool
    // argument changes it, so the model never picks the account or the password.
    #[command(flatten)]
    escalation: swiftide_ssh_executor::flags::BecomeArgs,
    #[command(flatten)]
    guard: swiftide_ssh_executor::flags::GuardArgs,
    // The trail is the operator's: no tool can turn it off or read it.
    #[command(flatten)]
    audit: swiftide_ssh_executor::flags::AuditArgs,
    #[command(flatten)]
    host_keys: HostKeys,
    #[command(flatten)]
    tools: Tools,
}

/// Destination (either --host or an ssh_config alias).
#[derive(Debug, Args)]
#[command(next_help_heading = "Destination (either --host or an ssh_config alias)")]
struct Destination {
    /// Host name or address.
    #[arg(long, value_name = "HOST", env = "SWIFTIDE_SSH_HOST")]
    host: Option<String>,
    /// A Host alias from ~/.ssh/config (HostName, User, Port, IdentityFile, ProxyJump,
    /// known-hosts settings...).
    #[arg(value_name = "ALIAS", conflicts_with = "ssh_config_alias")]
    alias: Option<String>,
    /// The same alias as a flag.
    #[arg(long, value_name = "ALIAS", env = "SWIFTIDE_SSH_CONFIG_ALIAS")]
    ssh_config_alias: Option<String>,
    /// Read ALIAS from FILE instead of ~/.ssh/config.
    #[arg(long, value_name = "FILE", env = "SWIFTIDE_SSH_CONFIG")]
    ssh_config: Option<PathBuf>,
    /// Default 22 (or the alias's Port).
    #[arg(long, value_name = "PORT", env = "SWIFTIDE_SSH_PORT")]
    port: Option<u16>,
    /// Default: the alias's User, else the login name of the running uid (its passwd entry, as ssh takes it).
    #[arg(long, value_name = "USER", env = "SWIFTIDE_SSH_USER")]
    user: Option<String>,
}

/// Authentication.
#[derive(Debug, Args)]
#[command(
    next_help_heading = "Authentication (tried in this order; with none given: the alias's identity files, else the ssh-agent)"
)]
struct Auth {
    /// Private key file (repeatable; the variable holds one file).
    #[arg(
        short = 'i',
        long = "identity",
        value_name = "FILE",
        env = "SWIFTIDE_SSH_IDENTITY"
    )]
    identities: Vec<PathBuf>,
    /// The ssh-agent at $SSH_AUTH_SOCK.
    #[arg(long, env = "SWIFTIDE_SSH_AGENT", value_parser = BoolishValueParser::new())]
    agent: bool,
    /// Read the password from environment variable VAR.
    #[arg(long, value_name = "VAR", env = "SWIFTIDE_SSH_PASSWORD_ENV")]
    password_env: Option<String>,
}

/// Host keys.
#[derive(Debug, Args)]
#[command(
    next_help_heading = "Host keys (default: strict, ~/.ssh/known_hosts and /etc/ssh/ssh_known_hosts)"
)]
struct HostKeys {
    /// known_hosts file to check strictly (repeatable; the variable holds one file).
    #[arg(long, value_name = "FILE", env = "SWIFTIDE_SSH_KNOWN_HOSTS")]
    known_hosts: Vec<PathBuf>,
    /// Record keys of unknown hosts in the first known_hosts file; a changed key is still
    /// refused.
    #[arg(
        long,
        env = "SWIFTIDE_SSH_ACCEPT_NEW_HOST_KEYS",
        value_parser = BoolishValueParser::new()
    )]
    accept_new_host_keys: bool,
    /// DISABLE host-key verification (anyone on the path can impersonate the host);
    /// throwaway test hosts only.
    #[arg(
        long,
        env = "SWIFTIDE_SSH_INSECURE_ACCEPT_ANY_HOST_KEY",
        value_parser = BoolishValueParser::new()
    )]
    insecure_accept_any_host_key: bool,
}

/// Tools.
#[derive(Debug, Args)]
#[command(next_help_heading = "Tools")]
struct Tools {
    /// Where commands run and relative paths resolve (default: --root, else the login
    /// directory).
    #[arg(long, value_name = "DIR", env = "SWIFTIDE_SSH_WORKDIR")]
    workdir: Option<PathBuf>,
    /// Confine the file tools to DIR (symlinks resolved by the server before each access);
    /// commands are confined only with --confine-writes (kernel-enforced, see the guard
    /// flags).
    #[arg(long, value_name = "DIR", env = "SWIFTIDE_SSH_ROOT")]
    root: Option<PathBuf>,
    /// Default command timeout in seconds (0 = none).
    #[arg(
        long = "timeout",
        value_name = "SECS",
        env = "SWIFTIDE_SSH_TIMEOUT",
        default_value_t = DEFAULT_TIMEOUT_SECS
    )]
    timeout_secs: u64,
    /// Output a command result keeps (head and tail); progress notifications still carry
    /// everything.
    #[arg(
        long,
        value_name = "N",
        env = "SWIFTIDE_SSH_MAX_OUTPUT_BYTES",
        default_value_t = DEFAULT_MAX_OUTPUT_BYTES
    )]
    max_output_bytes: usize,
    /// TCP + handshake + authentication, in seconds (default 10).
    #[arg(
        long = "connect-timeout",
        value_name = "SECS",
        env = "SWIFTIDE_SSH_CONNECT_TIMEOUT"
    )]
    connect_timeout_secs: Option<u64>,
    /// Jobs that ended at least this many days ago are removed from the host after a job
    /// start (0 = keep them until removed).
    #[arg(
        long = "job-retention-days",
        value_name = "DAYS",
        env = "SWIFTIDE_SSH_JOB_RETENTION_DAYS",
        default_value_t = DEFAULT_JOB_RETENTION_DAYS
    )]
    job_retention_days: u64,
    /// Logs go to stderr (stdout carries the protocol).
    #[arg(
        long,
        value_name = "LEVEL",
        env = "SWIFTIDE_SSH_LOG_LEVEL",
        value_enum,
        default_value_t = LogLevel::Warn
    )]
    log_level: LogLevel,
}

/// `--log-level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl From<LogLevel> for tracing::Level {
    fn from(level: LogLevel) -> Self {
        match level {
            LogLevel::Error => tracing::Level::ERROR,
            LogLevel::Warn => tracing::Level::WARN,
            LogLevel::Info => tracing::Level::INFO,
            LogLevel::Debug => tracing::Level::DEBUG,
            LogLevel::Trace => tracing::Level::TRACE,
        }
    }
}

impl Cli {
    /// The combinations clap's declarations cannot state: a boolean flag set to `false`
    /// through its variable must not count as given, which clap's `conflicts_with` would.
    fn check(&self) -> Result<(), clap::Error> {
        let conflict = |message: &str| {
            Err(Cli::command().error(clap::error::ErrorKind::ArgumentConflict, message))
        };
        let alias = self.alias();
        if self.destination.ssh_config.is_some() && alias.is_none() {
            return conflict("--ssh-config needs an alias");
        }
        if self.destination.host.is_some() && alias.is_some() {
            return conflict("pass either --host or an ssh_config alias, not both");
        }
        let keys = &self.host_keys;
        if keys.accept_new_host_keys && keys.insecure_accept_any_host_key {
            return conflict(
                "--accept-new-host-keys and --insecure-accept-any-host-key exclude each other",
            );
        }
        if keys.insecure_accept_any_host_key && !keys.known_hosts.is_empty() {
            return conflict("--insecure-accept-any-host-key ignores --known-hosts; pass only one");
        }
        // A password setting without escalation, SWIFTIDE_SSH_BECOME=false next to a setting
        // that implies it.
        if let Err(message) = self.escalation.check() {
            return conflict(&message);
        }
        Ok(())
    }

    fn alias(&self) -> Option<&String> {
        let destination = &self.destination;
        destination
            .alias
            .as_ref()
            .or(destination.ssh_config_alias.as_ref())
    }

    /// The executor builder these settings describe.
    fn builder(&self) -> Result<SshExecutorBuilder, String> {
        let destination = &self.destination;
        let mut builder = match (self.alias(), &destination.ssh_config) {
            (Some(alias), Some(file)) => {
                SshExecutor::from_ssh_config_file(file, alias).map_err(|error| error.to_string())?
            }
            (Some(alias), None) => {
                SshExecutor::from_ssh_config(alias).map_err(|error| error.to_string())?
            }
            (None, _) => SshExecutor::builder().host(destination.host.clone().unwrap_or_default()),
        };
        if let Some(port) = destination.port {
            builder = builder.port(port);
        }
        if let Some(user) = &destination.user {
            builder = builder.user(user.clone());
        }
        for identity in &self.auth.identities {
            builder = builder.private_key_file(identity.clone());
        }
        if self.auth.agent {
            builder = builder.agent();
        }
        if let Some(name) = &self.auth.password_env {
            let password = std::env::var(name)
                .map_err(|_| format!("--password-env {name}: the variable is not set"))?;
            builder = builder.password(password);
        }
        if let Some(escalation) = self.escalation.escalation()? {
            tracing::info!(
                "privilege escalation: every tool runs as {} ({}{})",
                escalation.target_user(),
                escalation.method(),
                if escalation.has_password() {
                    ", with a password"
                } else {
                    ""
                }
            );
            builder = builder.with_become(escalation);
        }
        let keys = &self.host_keys;
        if keys.insecure_accept_any_host_key {
            tracing::warn!(
                "--insecure-accept-any-host-key: host keys are NOT verified; anyone on the \
                 network path can impersonate the host"
            );
            builder = builder.insecure_accept_any_host_key();
        } else if keys.accept_new_host_keys {
            let file = keys
                .known_hosts
                .first()
                .cloned()
                .unwrap_or_else(|| PathBuf::from("~/.ssh/known_hosts"));
            builder = builder.accept_new_host_keys(file);
        } else if !keys.known_hosts.is_empty() {
            builder = builder.host_key_policy(HostKeyPolicy::Strict {
                known_hosts: keys.known_hosts.clone(),
            });
        }
        let tools = &self.tools;
        if let Some(workdir) = tools.workdir.as_ref().or(tools.root.as_ref()) {
            builder = builder.workdir(workdir.clone());
        }
        let timeout = tools.timeout_secs;
        builder = builder.default_timeout((timeout > 0).then(|| Duration::from_secs(timeout)));
        if let Some(secs) = tools.connect_timeout_secs {
            builder = builder.connect_timeout(Duration::from_secs(secs));
        }
        let days = tools.job_retention_days;
        builder = builder
            .job_retention((days > 0).then(|| Duration::from_secs(days.saturating_mul(24 * 3600))));
        Ok(self
            .guard
            .apply(builder.max_output_bytes(Some(tools.max_output_bytes))))
    }

    /// The server these settings describe, built without connecting (inside a runtime), and
    /// the `--audit` trail it records to, to flush when it stops.
    async fn server(&self) -> Result<(SshMcpServer, Option<AuditTrail>), String> {
        let trail = self.audit.open().await.map_err(|error| error.to_string())?;
        let builder = AuditArgs::apply(trail.as_ref(), self.builder()?);
        let executor = builder.build_lazy().map_err(|error| error.to_string())?;
        let mut options = ServerOptions::default();
        if let Some(root) = &self.tools.root {
            options = options.root(root.clone());
        }
        Ok((SshMcpServer::new(executor, options), trail))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(error) = cli.check() {
        error.exit();
    }
    // A second subscriber cannot be installed; there is none before this one.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_max_level(tracing::Level::from(cli.tools.log_level))
        .try_init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("swiftide-ssh-mcp: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // The executor is built (without connecting) inside the runtime its pool lives on.
    let result = runtime.block_on(async {
        let (server, trail) = cli.server().await?;
        let served = serve(server).await.map_err(|error| error.to_string());
        if let Some(trail) = trail {
            trail.flush().await.map_err(|error| error.to_string())?;
        }
        served
    });
    // Background kills of cancelled commands get a moment; a command still running when the
    // process exits is killed by its supervisor when the connection closes.
    runtime.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("swiftide-ssh-mcp: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use swiftide_ssh_executor::BecomeMethod;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let cli =
            Cli::try_parse_from(std::iter::once("swiftide-ssh-mcp").chain(args.iter().copied()))?;
        cli.check()?;
        Ok(cli)
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_and_alias_parse() {
        let cli = parse(&[
            "--host=example",
            "--port",
            "2222",
            "-i",
            "/k",
            "--identity",
            "/k2",
            "--known-hosts",
            "/kh",
            "--root",
            "/srv",
            "--timeout",
            "0",
            "--log-level",
            "debug",
        ])
        .unwrap();
        assert_eq!(cli.destination.host.as_deref(), Some("example"));
        assert_eq!(cli.destination.port, Some(2222));
        assert_eq!(
            cli.auth.identities,
            vec![PathBuf::from("/k"), PathBuf::from("/k2")]
        );
        assert_eq!(cli.host_keys.known_hosts, vec![PathBuf::from("/kh")]);
        assert_eq!(cli.tools.root, Some(PathBuf::from("/srv")));
        assert_eq!(cli.tools.timeout_secs, 0);
        assert_eq!(cli.tools.max_output_bytes, DEFAULT_MAX_OUTPUT_BYTES);
        assert_eq!(cli.tools.log_level, LogLevel::Debug);
        assert!(!cli.auth.agent);

        let cli = parse(&["build-1"]).unwrap();
        assert_eq!(cli.alias().map(String::as_str), Some("build-1"));
        assert_eq!(cli.tools.timeout_secs, DEFAULT_TIMEOUT_SECS);
        assert_eq!(cli.tools.log_level, LogLevel::Warn);
        let cli = parse(&["--ssh-config-alias", "build-2", "--ssh-config", "/c"]).unwrap();
        assert_eq!(cli.alias().map(String::as_str), Some("build-2"));
    }

    #[test]
    fn become_flags_parse_and_imply_become() {
        let cli = parse(&["--host", "a"]).unwrap();
        assert!(!cli.escalation.wanted());
        assert!(cli.escalation.escalation().unwrap().is_none());
        let cli = parse(&["--host", "a", "--become"]).unwrap();
        let escalation = cli.escalation.escalation().unwrap().unwrap();
        assert_eq!(
            (
                escalation.method(),
                escalation.target_user(),
                escalation.has_password()
            ),
            (BecomeMethod::Sudo, "root", false)
        );
        let cli = parse(&[
            "--host",
            "a",
            "--become-method",
            "su",
            "--become-user",
            "postgres",
            "--become-flags",
            "-l  -m",
        ])
        .unwrap();
        let escalation = cli.escalation.escalation().unwrap().unwrap();
        assert_eq!(
            (
                escalation.method(),
                escalation.target_user(),
                escalation.flags()
            ),
            (
                BecomeMethod::Su,
                "postgres",
                &["-l".to_owned(), "-m".to_owned()][..]
            )
        );
        let unset = parse(&[
            "--host",
            "a",
            "--become",
            "--become-password-env",
            "SWIFTIDE_SSH_TEST_SURELY_UNSET_VARIABLE",
        ])
        .unwrap();
        let error = unset.escalation.escalation().unwrap_err();
        assert!(error.contains("is not set"), "{error}");
    }

    #[test]
    fn bad_command_lines_are_refused() {
        for args in [
            &[][..],
            &["--host", "a", "alias"],
            &["--host", "a", "--ssh-config-alias", "alias"],
            &["one", "--ssh-config-alias", "two"],
            &["one", "two"],
            &["--host", "a", "--port", "x"],
            &["--host", "a", "--port", "70000"],
            &["--host", "a", "--timeout", "-1"],
            &["--host", "a", "--log-level", "loud"],
            &["--host", "a", "--frobnicate"],
            &["--host"],
            &["--host", "a", "--ssh-config", "/c"],
            &[
                "--host",
                "a",
                "--accept-new-host-keys",
                "--insecure-accept-any-host-key",
            ],
            &[
                "--host",
                "a",
                "--insecure-accept-any-host-key",
                "--known-hosts",
                "k",
            ],
            &["--host", "a", "--become-method", "pkexec"],
            &["--host", "a", "--become-password-file", "/p"],
            &["--host", "a", "--become-password-env", "P"],
            &[
                "--host",
                "a",
                "--become",
                "--become-password-file",
                "/p",
                "--become-password-env",
                "P",
            ],
        ] {
            assert!(parse(args).is_err(), "accepted {args:?}");
        }
        let help = parse(&["--help"]).unwrap_err();
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
        let version = parse(&["--version"]).unwrap_err();
        assert_eq!(version.kind(), clap::error::ErrorKind::DisplayVersion);
    }
}
