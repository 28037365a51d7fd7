//! Building from the OpenSSH client configuration: [`HostConfig::to_builder`] and
//! [`SshExecutor::from_ssh_config`].

use std::path::{Path, PathBuf};

use crate::{
    builder::SshExecutorBuilder,
    config::{
        AuthMethod, HostConfig, HostKeyPolicy, JumpHost, SshConfig, StrictHostKeyChecking,
        ssh_config::{agent_available, certifies, local_user},
    },
    error::{Error, Result},
    executor::SshExecutor,
};

impl SshConfig {
    /// The jump hosts of a `ProxyJump` chain given outside this file (an Ansible
    /// inventory's `-J bastion,user@inner:2222`), each hop resolved through this file as
    /// `ssh -J` resolves it: an alias gets its `HostName`, `Port`, `User`, keys and host-key
    /// settings; `none` is no hops.
    ///
    /// # Errors
    /// [`Error::Config`] for a malformed chain, one too long or nested too deep, or a hop
    /// with a `ProxyCommand`.
    pub fn jump_hosts(&self, chain: &str) -> Result<Vec<JumpHost>> {
        self.resolve_proxy_jump(chain)?
            .iter()
            .map(HostConfig::to_jump_host)
            .collect()
    }
}

impl HostConfig {
    /// A builder with these settings: host, port, user, authentication, host-key policy,
    /// keepalive, connect timeout and jump hosts. Setters called on it afterwards win;
    /// the identity files are used only if no authentication method is added explicitly,
    /// and a [`jump_host`](SshExecutorBuilder::jump_host) call replaces the `ProxyJump`
    /// hops.
    ///
    /// # Errors
    /// [`Error::Config`] when a `ProxyCommand` is in effect for the host or its first hop.
    pub fn to_builder(&self) -> Result<SshExecutorBuilder> {
        self.refuse_proxy_command()?;
        let mut builder = SshExecutor::builder()
            .host(self.host_name.clone())
            .port(self.port)
            .host_key_policy(self.host_key_policy());
        if let Some(user) = &self.user {
            builder = builder.user(user.clone());
        }
        if let Some(interval) = self.server_alive_interval {
            builder = builder.keepalive_interval((!interval.is_zero()).then_some(interval));
        }
        if let Some(max) = self.server_alive_count_max {
            builder = builder.keepalive_max(max);
        }
        if let Some(timeout) = self.connect_timeout.filter(|t| !t.is_zero()) {
            builder = builder.connect_timeout(timeout);
        }
        builder.file_auth = self.auth_methods();
        builder.jump_hosts = self
            .proxy_jump
            .iter()
            .map(HostConfig::to_jump_host)
            .collect::<Result<_>>()?;
        builder.jump_hosts_from_file = !builder.jump_hosts.is_empty();
        Ok(builder)
    }

    fn refuse_proxy_command(&self) -> Result<()> {
        match &self.proxy_command {
            Some(command) => Err(Error::Config {
                reason: format!(
                    "ssh config: `ProxyCommand {command}` applies to {}, and ProxyCommand is \
                     not supported (use ProxyJump, or `ProxyCommand none`)",
                    self.alias
                ),
            }),
            None => Ok(()),
        }
    }

    /// A hop's own user, keys and host-key policy; as with `ssh`, a hop without `User` logs
    /// in as the local user, not as the target's user.
    fn to_jump_host(&self) -> Result<JumpHost> {
        self.refuse_proxy_command()?;
        let mut hop = JumpHost::new(self.host_name.clone())
            .port(self.port)
            .host_key_policy(self.host_key_policy());
        if let Some(user) = self.user.clone().or_else(local_user) {
            hop = hop.user(user);
        }
        for method in self.auth_methods() {
            hop = hop.auth_method(method);
        }
        Ok(hop)
    }

    /// The agent first (unless `IdentitiesOnly`), then the identity files that exist; like
    /// `ssh`, each identity is offered first with the certificates that certify it (from
    /// `CertificateFile`, then `<file>-cert.pub`), then as the plain key.
    fn auth_methods(&self) -> Vec<AuthMethod> {
        let agent = (!self.identities_only && agent_available())
            .then_some(AuthMethod::Agent { socket: None });
        let files = self
            .identity_files
            .iter()
            .filter(|path| {
                // `ssh` skips missing identities too; say so for whoever debugs a login.
                let exists = path.is_file();
                if !exists {
                    tracing::debug!(alias = %self.alias, path = %path.display(),
                        "identity file does not exist; skipped");
                }
                exists
            })
            .flat_map(|path| {
                let mut conventional = path.clone().into_os_string();
                conventional.push("-cert.pub");
                let certificates: Vec<AuthMethod> = self
                    .certificate_files
                    .iter()
                    .cloned()
                    .chain([PathBuf::from(conventional)])
                    .filter(|certificate| certifies(certificate, path))
                    .map(|certificate| AuthMethod::CertificateFile {
                        key: path.clone(),
                        passphrase: None,
                        certificate,
                    })
                    .collect();
                certificates.into_iter().chain([AuthMethod::KeyFile {
                    path: path.clone(),
                    passphrase: None,
                }])
            });
        agent.into_iter().chain(files).collect()
    }

    fn host_key_policy(&self) -> HostKeyPolicy {
        let known_hosts: Vec<PathBuf> = self
            .user_known_hosts_files
            .iter()
            .chain(&self.global_known_hosts_files)
            .cloned()
            .collect();
        match self.strict_host_key_checking {
            StrictHostKeyChecking::AcceptNew => HostKeyPolicy::AcceptNew { known_hosts },
            StrictHostKeyChecking::No => HostKeyPolicy::InsecureAcceptAnyHostKey,
            StrictHostKeyChecking::Yes | StrictHostKeyChecking::Ask => {
                HostKeyPolicy::Strict { known_hosts }
            }
        }
    }
}

/// Building from the OpenSSH client configuration.
impl SshExecutor {
    /// A builder for the host that `alias` names in `~/.ssh/config` (`HostName`, `Port`,
    /// `User`, `IdentityFile`, `ProxyJump`, known hosts, ... — see [`SshConfig`] for every
    /// keyword). Without a config file, or without a matching block, `alias` is the host
    /// name. Setters called on the returned builder win over the file.
    ///
    /// ```no_run
    /// # async fn demo() -> swiftide_ssh_executor::Result<()> {
    /// use swiftide_ssh_executor::SshExecutor;
    ///
    /// let executor = SshExecutor::from_ssh_config("build-1")?
    ///     .workdir("/srv/checkout")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::SshConfig`] for an unreadable or invalid file, [`Error::Config`] for an
    /// unsupported `ProxyCommand`.
    pub fn from_ssh_config(alias: &str) -> Result<SshExecutorBuilder> {
        SshConfig::user_config()?.resolve(alias)?.to_builder()
    }

    /// Like [`from_ssh_config`](Self::from_ssh_config), reading `path` instead of
    /// `~/.ssh/config` (like `ssh -F path`).
    ///
    /// # Errors
    /// As [`from_ssh_config`](Self::from_ssh_config); a missing file is an error.
    pub fn from_ssh_config_file(path: impl AsRef<Path>, alias: &str) -> Result<SshExecutorBuilder> {
        SshConfig::load(path)?.resolve(alias)?.to_builder()
    }
}
