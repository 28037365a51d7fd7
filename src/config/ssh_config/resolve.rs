//! Resolving an alias: the first value of each keyword among the entries that apply to it,
//! defaults, tokens expanded, and its `ProxyJump` hops resolved in turn.

use std::{path::PathBuf, time::Duration};

use crate::error::{Error, Result};

use super::matching::holds;
use super::setting::{JumpSpec, Setting};
use super::tokens::{Tokens, expand, expand_all, expand_path, tilde};
use super::{Entry, HostConfig, Origin, SshConfig, StrictHostKeyChecking};

/// `ProxyJump` chains reached through the first hop's own `ProxyJump` nest at most this deep.
const MAX_JUMP_DEPTH: usize = 8;

/// A resolved `ProxyJump` chain has at most this many hops (each one an SSH connection
/// kept open).
const MAX_JUMP_HOPS: usize = 64;

/// The identity files `ssh` tries when none is configured (the ones russh can load).
const DEFAULT_IDENTITIES: &[&str] = &["id_rsa", "id_ecdsa", "id_ed25519"];

impl SshConfig {
    /// `jump_depth`: how deep in `ProxyJump` chains `alias` is, or `None` to ignore its own
    /// `ProxyJump` and `ProxyCommand` (a hop after the first, see [`Self::resolve_hops`]).
    pub(super) fn resolve_as(
        &self,
        alias: &str,
        overrides: Overrides,
        jump_depth: Option<usize>,
    ) -> Result<HostConfig> {
        let applied = self.applied(alias);
        let host_name = match applied.host_name {
            Some((value, origin)) => {
                let tokens = self.tokens(alias, alias, 22, None);
                expand(value, "h", &tokens, false).map_err(|e| origin.error(e))?
            }
            None => alias.to_owned(),
        };
        let port = overrides.port.or(applied.port).unwrap_or(22);
        let user = overrides.user.or(applied.user.map(str::to_owned));
        let tokens = self.tokens(alias, &host_name, port, user.as_deref());
        let (proxy_jump, proxy_command) = match (&applied.proxy, jump_depth) {
            (Some(Proxy::Jump(specs)), Some(depth)) => (self.resolve_hops(specs, depth)?, None),
            (Some(Proxy::Command(command)), Some(_)) => (Vec::new(), command.map(str::to_owned)),
            (None, _) | (_, None) => (Vec::new(), None),
        };
        Ok(HostConfig {
            alias: alias.to_owned(),
            identity_files: self.identity_files(&applied, &tokens)?,
            certificate_files: expand_all(&applied.certificate_files, &tokens)?,
            user_known_hosts_files: self.user_known_hosts(&applied, &tokens)?,
            global_known_hosts_files: self.global_known_hosts(&applied)?,
            host_name,
            port,
            user,
            identities_only: applied.identities_only.unwrap_or(false),
            proxy_jump,
            proxy_command,
            strict_host_key_checking: applied.strict.unwrap_or(StrictHostKeyChecking::Ask),
            server_alive_interval: applied.alive_interval,
            server_alive_count_max: applied.alive_count_max,
            connect_timeout: applied.connect_timeout,
            ignored: applied.ignored,
        })
    }

    /// Collects the first value of each keyword from the entries that apply to `alias`.
    fn applied(&self, alias: &str) -> Applied<'_> {
        let host = alias.to_ascii_lowercase();
        let mut memo = vec![None; self.scopes];
        let mut applied = Applied::default();
        for entry in self
            .index
            .candidates(&host)
            .filter_map(|i| self.entries.get(i))
        {
            if entry
                .scope
                .as_ref()
                .is_none_or(|scope| holds(scope, &host, &mut memo))
            {
                applied.take(entry);
            }
        }
        applied
    }

    /// Resolves each hop through the file. Only the first hop's own `ProxyJump` counts:
    /// OpenSSH runs `ssh -J <earlier hops> -W target <last hop>`, so the command line
    /// overrides every later hop's, while the first hop is reached by a plain `ssh`. So
    /// only the first hop's chain is resolved (resolving every hop's and throwing it away
    /// made the work grow as fan-out to the depth: seconds for a 333-byte file).
    pub(super) fn resolve_hops(&self, specs: &[JumpSpec], depth: usize) -> Result<Vec<HostConfig>> {
        if depth >= MAX_JUMP_DEPTH {
            return Err(Error::Config {
                reason: format!("ProxyJump chains nest more than {MAX_JUMP_DEPTH} deep (a loop?)"),
            });
        }
        let too_long = || Error::Config {
            reason: format!("a ProxyJump chain has more than {MAX_JUMP_HOPS} hops"),
        };
        if specs.len() > MAX_JUMP_HOPS {
            return Err(too_long());
        }
        let mut hops = Vec::new();
        for (index, spec) in specs.iter().enumerate() {
            let overrides = Overrides {
                user: spec.user.clone(),
                port: spec.port,
            };
            let jump_depth = (index == 0).then_some(depth + 1);
            let mut hop = self.resolve_as(&spec.host, overrides, jump_depth)?;
            hops.append(&mut hop.proxy_jump);
            hops.push(hop);
            if hops.len() > MAX_JUMP_HOPS {
                return Err(too_long());
            }
        }
        Ok(hops)
    }

    fn tokens<'a>(
        &'a self,
        alias: &'a str,
        host_name: &'a str,
        port: u16,
        user: Option<&'a str>,
    ) -> Tokens<'a> {
        Tokens {
            alias,
            host_name,
            port,
            remote_user: user.or(self.local_user.as_deref()),
            local_user: self.local_user.as_deref(),
            home: self.home.as_deref(),
        }
    }

    fn identity_files(&self, applied: &Applied<'_>, tokens: &Tokens<'_>) -> Result<Vec<PathBuf>> {
        if applied.identity_files.is_empty() {
            let Some(home) = &self.home else {
                return Ok(Vec::new());
            };
            let ssh_dir = home.join(".ssh");
            return Ok(DEFAULT_IDENTITIES.iter().map(|f| ssh_dir.join(f)).collect());
        }
        expand_all(&applied.identity_files, tokens)
    }

    fn user_known_hosts(&self, applied: &Applied<'_>, tokens: &Tokens<'_>) -> Result<Vec<PathBuf>> {
        match applied.user_known_hosts {
            Some((files, origin)) => files
                .iter()
                .map(|raw| expand_path(raw, tokens).map_err(|e| origin.error(e)))
                .collect(),
            None => Ok(self
                .home
                .iter()
                .flat_map(|home| ["known_hosts", "known_hosts2"].map(|f| home.join(".ssh").join(f)))
                .collect()),
        }
    }

    fn global_known_hosts(&self, applied: &Applied<'_>) -> Result<Vec<PathBuf>> {
        match applied.global_known_hosts {
            Some((files, origin)) => files
                .iter()
                .map(|raw| tilde(raw, self.home.as_deref()).map_err(|e| origin.error(e)))
                .map(|path| path.map(PathBuf::from))
                .collect(),
            None => Ok(vec![
                PathBuf::from("/etc/ssh/ssh_known_hosts"),
                PathBuf::from("/etc/ssh/ssh_known_hosts2"),
            ]),
        }
    }
}

/// `user@` and `:port` given in a `ProxyJump` element, which win over the hop's own config.
#[derive(Default)]
pub(super) struct Overrides {
    user: Option<String>,
    port: Option<u16>,
}

enum Proxy<'a> {
    Jump(&'a [JumpSpec]),
    Command(Option<&'a str>),
}

/// The first value of every keyword, from the entries that apply to one host.
#[derive(Default)]
struct Applied<'a> {
    host_name: Option<(&'a str, &'a Origin)>,
    user: Option<&'a str>,
    port: Option<u16>,
    identity_files: Vec<(&'a str, &'a Origin)>,
    certificate_files: Vec<(&'a str, &'a Origin)>,
    identities_only: Option<bool>,
    proxy: Option<Proxy<'a>>,
    user_known_hosts: Option<(&'a [String], &'a Origin)>,
    global_known_hosts: Option<(&'a [String], &'a Origin)>,
    strict: Option<StrictHostKeyChecking>,
    alive_interval: Option<Duration>,
    alive_count_max: Option<usize>,
    connect_timeout: Option<Duration>,
    ignored: Vec<String>,
}

impl<'a> Applied<'a> {
    fn take(&mut self, entry: &'a Entry) {
        let origin = &entry.origin;
        match &entry.setting {
            Setting::HostName(v) => first(&mut self.host_name, (v.as_str(), origin)),
            Setting::User(v) => first(&mut self.user, v.as_str()),
            Setting::Port(v) => first(&mut self.port, *v),
            Setting::IdentityFile(v) => {
                if !self.identity_files.iter().any(|(f, _)| f == v) {
                    self.identity_files.push((v.as_str(), origin));
                }
            }
            Setting::CertificateFile(v) => {
                if !self.certificate_files.iter().any(|(f, _)| f == v) {
                    self.certificate_files.push((v.as_str(), origin));
                }
            }
            Setting::IdentitiesOnly(v) => first(&mut self.identities_only, *v),
            Setting::ProxyJump(v) => first(&mut self.proxy, Proxy::Jump(v)),
            Setting::ProxyCommand(v) => first(&mut self.proxy, Proxy::Command(v.as_deref())),
            Setting::UserKnownHostsFile(v) => first(&mut self.user_known_hosts, (v, origin)),
            Setting::GlobalKnownHostsFile(v) => first(&mut self.global_known_hosts, (v, origin)),
            Setting::StrictHostKeyChecking(v) => first(&mut self.strict, *v),
            Setting::ServerAliveInterval(v) => first(&mut self.alive_interval, *v),
            Setting::ServerAliveCountMax(v) => first(&mut self.alive_count_max, *v),
            Setting::ConnectTimeout(v) => first(&mut self.connect_timeout, *v),
            Setting::Ignored(keyword) => self.ignored.push(format!(
                "{keyword} ({}:{})",
                origin.file.display(),
                origin.line
            )),
        }
    }
}

fn first<T>(slot: &mut Option<T>, value: T) {
    if slot.is_none() {
        *slot = Some(value);
    }
}
