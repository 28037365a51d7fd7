//! Host selection: the hosts the flags pick (node sets, inventories, host files, shards) and
//! the fleet built from them with the connection, rollout and escalation flags.

use std::{
    collections::HashSet,
    io::Write,
    path::{Path, PathBuf},
};

use swiftide_ssh_executor::{
    Fleet, HostKeyPolicy, SshConfig, SshExecutor, SshExecutorBuilder,
    audit::AuditTrail,
    flags::AuditArgs,
    fleet::{Inventory, InventoryHost, expand_nodeset},
};

use crate::args::{FleetArgs, Usage, seconds};

/// `[user@]host[:port]` of a host-file line or a plain name.
pub(crate) fn split_destination(entry: &str) -> (Option<&str>, &str, Option<u16>) {
    let (user, rest) = match entry.split_once('@') {
        Some((user, rest)) => (Some(user), rest),
        None => (None, entry),
    };
    if let Some(inner) = rest.strip_prefix('[')
        && let Some((host, after)) = inner.split_once(']')
    {
        return (
            user,
            host,
            after.strip_prefix(':').and_then(|p| p.parse().ok()),
        );
    }
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(port) => (user, host, Some(port)),
            Err(_) => (user, rest, None),
        },
        _ => (user, rest, None),
    }
}

/// The names of a host file: node sets expanded, `[v6]:port` lines kept whole.
fn read_hosts_file(path: &Path) -> Result<Vec<String>, Usage> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Usage(format!("cannot read {}: {e}", path.display())))?;
    let mut names = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        if line.contains("]:") || line.starts_with('[') {
            names.push(line.to_owned());
        } else {
            names.extend(expand_nodeset(line)?);
        }
    }
    Ok(names)
}

impl FleetArgs {
    /// The selected host names, in order, without duplicates.
    pub(crate) fn names(&self, inventory: Option<&Inventory>) -> Result<Vec<String>, Usage> {
        let hosts = &self.hosts;
        let mut names = Vec::new();
        for nodes in &hosts.nodes {
            // pdsh's `-w ^FILE`: the hosts listed in FILE.
            match nodes.strip_prefix('^') {
                Some(file) => names.extend(read_hosts_file(Path::new(file))?),
                None => names.extend(expand_nodeset(nodes)?),
            }
        }
        if !hosts.groups.is_empty() || !hosts.limit.is_empty() {
            let inventory =
                inventory.ok_or_else(|| Usage("-g and --limit need an inventory (-i)".into()))?;
            // The first -g is the pattern; later ones narrow it, as --limit does.
            let (pattern, narrowing) = match hosts.groups.split_first() {
                Some((pattern, rest)) => (pattern.as_str(), rest),
                None => ("all", &[][..]),
            };
            let limits: Vec<&String> = narrowing.iter().chain(&hosts.limit).collect();
            names.extend(
                inventory
                    .select_limited(pattern, &limits)?
                    .into_iter()
                    .map(|h| h.name),
            );
        } else if let Some(inventory) = inventory
            && hosts.nodes.is_empty()
            && hosts.hosts_file.is_none()
        {
            names.extend(inventory.host_names().iter().cloned());
        }
        if let Some(file) = &hosts.hosts_file {
            let listed = read_hosts_file(file)?;
            if hosts.nodes.is_empty() && hosts.groups.is_empty() {
                // Alone (or with only an inventory, where its names are looked up): the
                // file's hosts.
                names = listed;
            } else {
                let keep: HashSet<String> = listed.into_iter().collect();
                names.retain(|name| keep.contains(name));
            }
        }
        let mut excluded = HashSet::new();
        for nodes in &self.hosts.exclude {
            excluded.extend(expand_nodeset(nodes)?);
        }
        let mut seen = HashSet::new();
        names.retain(|name| !excluded.contains(name) && seen.insert(name.clone()));
        if names.is_empty() {
            return Err(Usage(
                "no hosts selected (give -w NODESET, -i INVENTORY [-g PATTERN] or --hosts-file)"
                    .into(),
            ));
        }
        Ok(names)
    }

    /// The executor builder of one host: its ~/.ssh/config settings, then its inventory
    /// variables, then this command line's flags where the inventory sets nothing.
    fn builder(
        &self,
        name: &str,
        config: &SshConfig,
        inventory: Option<&InventoryHost>,
    ) -> Result<SshExecutorBuilder, Usage> {
        let connection = &self.connection;
        let (mut user, mut port) = (connection.user.clone(), connection.port);
        let mut builder = match inventory {
            // The flags first: the inventory's variables win over them, as in Ansible.
            Some(host) => {
                let mut builder = config.resolve(host.address())?.to_builder()?;
                if let Some(user) = user {
                    builder = builder.user(user);
                }
                if let Some(port) = port {
                    builder = builder.port(port);
                }
                let (builder, warnings) = host.configure(builder, Some(config))?;
                for warning in warnings {
                    eprintln!("swiftide-ssh: inventory host {warning}");
                }
                builder
            }
            None => {
                let (line_user, host, line_port) = split_destination(name);
                if line_user.is_some() {
                    user = line_user.map(str::to_owned);
                }
                port = line_port.or(port);
                let mut builder = config.resolve(host)?.to_builder()?;
                if let Some(user) = user {
                    builder = builder.user(user);
                }
                if let Some(port) = port {
                    builder = builder.port(port);
                }
                builder
            }
        };
        if let Some(secs) = connection.connect_timeout {
            builder = builder.connect_timeout(seconds("-t", secs)?);
        }
        for identity in &connection.identities {
            builder = builder.private_key_file(identity.clone());
        }
        if connection.agent {
            builder = builder.agent();
        }
        if connection.accept_new {
            let file = connection
                .known_hosts
                .first()
                .cloned()
                .unwrap_or_else(|| PathBuf::from("~/.ssh/known_hosts"));
            builder = builder.accept_new_host_keys(file);
        } else if !connection.known_hosts.is_empty() {
            builder = builder.host_key_policy(HostKeyPolicy::Strict {
                known_hosts: connection.known_hosts.clone(),
            });
        }
        Ok(self.guard.apply(builder))
    }

    /// The fleet these flags describe (built without connecting; inside the runtime), each
    /// executor's builder passed through `tune` (a subcommand's own settings) last.
    pub(crate) fn fleet(
        &self,
        tune: impl Fn(SshExecutorBuilder) -> SshExecutorBuilder,
    ) -> Result<Fleet, Usage> {
        let fleet = self.selected(tune)?;
        // Last, after every usage error the hosts could give: -K asks on the terminal here.
        if let Some(escalation) = self.escalation.escalation()? {
            return Ok(fleet.with_become(escalation)?);
        }
        Ok(fleet)
    }

    /// [`fleet`](Self::fleet), every executor recording to the `--audit` trail when one is
    /// given: flush the trail when the work is done.
    pub(crate) async fn audited_fleet(
        &self,
        tune: impl Fn(SshExecutorBuilder) -> SshExecutorBuilder,
    ) -> Result<(Fleet, Option<AuditTrail>), Usage> {
        let trail = self.audit.open().await?;
        let fleet = self.fleet(|builder| AuditArgs::apply(trail.as_ref(), tune(builder)))?;
        Ok((fleet, trail))
    }

    /// `--list-hosts`: prints the selected hosts without connecting to any; true when it
    /// did (the subcommand then does nothing else).
    pub(crate) fn list_hosts(&self) -> Result<bool, Usage> {
        if !self.output.list_hosts {
            return Ok(false);
        }
        let fleet = self.selected(|builder| builder)?;
        let mut stdout = std::io::stdout().lock();
        for (name, executor) in fleet.names().iter().zip(fleet.members()) {
            let (user, address, port) = (executor.user(), executor.host(), executor.port());
            let line = if self.output.json {
                serde_json::json!({"name": name, "user": user, "address": address, "port": port})
                    .to_string()
            } else if address.contains(':') {
                format!("{name} {user}@[{address}]:{port}")
            } else {
                format!("{name} {user}@{address}:{port}")
            };
            // A closed pipe (`| head`) ends the listing, nothing more.
            if writeln!(stdout, "{line}").is_err() {
                break;
            }
        }
        Ok(true)
    }

    /// The selected hosts as a fleet with this command line's rollout settings, without
    /// the escalation (which may ask for a password).
    fn selected(
        &self,
        tune: impl Fn(SshExecutorBuilder) -> SshExecutorBuilder,
    ) -> Result<Fleet, Usage> {
        let config = match &self.hosts.ssh_config {
            Some(path) => SshConfig::load(path)?,
            None => SshConfig::user_config()?,
        };
        let inventory = if self.hosts.inventory.is_empty() {
            None
        } else {
            let inventory = Inventory::from_paths(&self.hosts.inventory)?;
            for warning in inventory.warnings() {
                eprintln!("swiftide-ssh: inventory: {warning}");
            }
            Some(inventory)
        };
        let names = self.names(inventory.as_ref())?;
        let members = names
            .into_iter()
            .map(|name| {
                let host = inventory.as_ref().and_then(|i| i.host(&name));
                let executor = self
                    .builder(&name, &config, host.as_ref())
                    .and_then(|builder| Ok(tune(builder).build_lazy()?))
                    .map_err(|Usage(message)| Usage(format!("{name}: {message}")))?;
                Ok((name, executor))
            })
            .collect::<Result<Vec<(String, SshExecutor)>, Usage>>()?;
        let mut fleet = Fleet::named(members);
        if let Some(shard) = self.hosts.shard {
            fleet = fleet.shard(shard.index, shard.count)?;
        }
        let rollout = &self.rollout;
        fleet = fleet.concurrency(rollout.fanout).retry_unreachable(
            rollout.retries,
            seconds("--retry-backoff", rollout.retry_backoff)?,
        );
        if let Some(secs) = rollout.timeout {
            fleet = fleet.per_host_timeout(seconds("-u", secs)?);
        }
        if let Some(batches) = &rollout.batch {
            fleet = fleet.batches(batches.clone());
        }
        if let Some(percent) = rollout.max_fail_percentage {
            fleet = fleet.max_fail_percentage(percent);
        }
        Ok(fleet.fail_fast(rollout.fail_fast))
    }
}
