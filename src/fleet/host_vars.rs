//! How an inventory host's connection variables configure its executor, for
//! [`Fleet::from_inventory_hosts`](super::Fleet::from_inventory_hosts) and the command line
//! alike: `ansible_host`, `ansible_port`, `ansible_user`, `ansible_ssh_private_key_file`,
//! and what `ansible_ssh_common_args` / `ansible_ssh_extra_args` carry that applies here
//! (`-J`/`ProxyJump`, `-p`, `-l`, `-i`, `StrictHostKeyChecking`, `UserKnownHostsFile`).

use std::path::PathBuf;

use super::inventory::{InventoryHost, InventorySshArgs};
use crate::{
    builder::SshExecutorBuilder,
    config::{HostKeyPolicy, JumpHost, SshConfig},
    error::Result,
};

impl InventoryHost {
    /// Applies this host's connection variables to `builder` (whose host should already be
    /// [`address`](Self::address)), returning it with the warnings a caller should show:
    /// ssh options that are not applied, and a `StrictHostKeyChecking=no` taken as
    /// `accept-new`.
    ///
    /// Precedence as Ansible's ssh connection gives it (ssh keeps the first value it is
    /// given, and Ansible passes `ansible_port` and `ansible_user` before the args):
    /// `ansible_port` / `ansible_user` over `-p` / `-l` in the args, which win over what
    /// `builder` had. Keys: `ansible_ssh_private_key_file` first, then the args' `-i` files.
    /// A `ProxyJump` chain's hops are resolved through `ssh_config` when given (aliases
    /// get their `HostName`, `User`, keys), else taken as `[user@]host[:port]`. Host keys
    /// are always checked: `StrictHostKeyChecking=no` (common in inventories) becomes
    /// `accept-new`, which records a new host's key and still refuses a changed one.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) for a bad `ansible_port` or
    /// unparsable ssh args; [`Error::Config`](crate::Error::Config) for a bad `ProxyJump`.
    pub fn configure(
        &self,
        mut builder: SshExecutorBuilder,
        ssh_config: Option<&SshConfig>,
    ) -> Result<(SshExecutorBuilder, Vec<String>)> {
        let args = self.ssh_args()?;
        let mut warnings = Vec::new();
        if !args.ignored.is_empty() {
            warnings.push(format!(
                "{}: ignoring ssh options of ansible_ssh_common_args/ansible_ssh_extra_args: {}",
                self.name,
                args.ignored.join(" ")
            ));
        }
        if let Some(port) = self.port()?.or(args.port) {
            builder = builder.port(port);
        }
        if let Some(user) = self.user().map(str::to_owned).or(args.user.clone()) {
            builder = builder.user(user);
        }
        if let Some(key) = self.private_key_file() {
            builder = builder.private_key_file(key);
        }
        for key in &args.identity_files {
            builder = builder.private_key_file(key.clone());
        }
        if let Some(chain) = &args.proxy_jump {
            let hops = match ssh_config {
                Some(config) => config.jump_hosts(chain)?,
                None if chain.eq_ignore_ascii_case("none") => Vec::new(),
                None => chain
                    .split(',')
                    .map(|hop| JumpHost::parse(hop.trim()))
                    .collect::<Result<_>>()?,
            };
            builder = builder.jump_hosts(hops);
        }
        Ok((
            host_keys(&self.name, builder, &args, &mut warnings),
            warnings,
        ))
    }
}

/// `StrictHostKeyChecking` and `UserKnownHostsFile` from the ssh args.
fn host_keys(
    name: &str,
    builder: SshExecutorBuilder,
    args: &InventorySshArgs,
    warnings: &mut Vec<String>,
) -> SshExecutorBuilder {
    let files = &args.known_hosts_files;
    let first_file = || {
        files
            .first()
            .cloned()
            .unwrap_or_else(|| PathBuf::from("~/.ssh/known_hosts"))
    };
    let checking = args
        .strict_host_key_checking
        .as_deref()
        .map(str::to_ascii_lowercase);
    match checking.as_deref() {
        Some("accept-new") => builder.accept_new_host_keys(first_file()),
        Some("no" | "off") => {
            warnings.push(format!(
                "{name}: the inventory's StrictHostKeyChecking=no is taken as accept-new: new \
                 host keys are recorded, changed ones still refused"
            ));
            builder.accept_new_host_keys(first_file())
        }
        // yes, ask (nobody to ask: as yes), or not given.
        _ if !files.is_empty() => builder.host_key_policy(HostKeyPolicy::Strict {
            known_hosts: files.clone(),
        }),
        _ => builder,
    }
}
