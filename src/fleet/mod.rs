//! Running one command on many hosts, the way operators run fleets: hosts chosen by node
//! set, Ansible inventory, `~/.ssh/config` alias or failed-hosts file ([`inventory`],
//! [`nodeset`]); rolling batches with failure thresholds and fail-fast ([`batch`]); retries
//! of unreachable hosts only; live output per host, in whole lines ([`live`]); files pushed
//! to and pulled from every host ([`copy`]); one job on every host ([`jobs`]); the same port
//! forwards on every host ([`Fleet::forward`]); every host classified ([`HostStatus`]),
//! folded like `clush -b` ([`fold`]), and recorded as JSON with an exit-code policy
//! ([`record`]).
//!
//! Bounded concurrency and a deadline per host: one slow or dead host never holds up the
//! others.

pub mod batch;
pub mod copy;
mod descriptors;
mod each;
pub mod fold;
mod forwards;
mod host_vars;
pub mod inventory;
pub mod jobs;
pub mod live;
pub mod nodeset;
pub mod record;
pub mod status;

use std::{ops::Range, path::Path, time::Duration};

use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

pub use batch::{BatchSize, Batches, Thresholds};
pub use copy::{FileChange, PushOptions, PushedFile, PushedFiles};
pub use fold::{FoldedGroup, fold_records};
pub use forwards::{FleetForwards, HostForward};
pub use inventory::{Inventory, InventoryHost, InventorySshArgs};
pub use jobs::{FleetJobStates, FleetJobs};
pub use live::{LiveLine, LiveLines};
pub use nodeset::{expand_nodeset, fold_nodeset};
pub use record::{
    HostRecord, PushedFileRecord, SCHEMA_VERSION, exit_code, max_exit_code, read_host_list,
    read_records, write_failed_hosts, write_records,
};
pub use status::{HostKeyProblem, HostStatus};

use crate::{
    builder::SshExecutorBuilder,
    command::{Execution, ExitStatus, OutputChunk},
    config::{SshConfig, limit},
    error::{Error, Result},
    executor::{ExecOptions, SshExecutor},
};

/// Runs commands on a set of hosts. One slow or dead host never holds up the others: each
/// host has its own deadline and at most [`concurrency`](Fleet::concurrency) hosts run at
/// once. Hosts run in [`batches`](Fleet::batches), stop on [thresholds](Fleet::max_fail_percentage),
/// and unreachable hosts are [retried](Fleet::retry_unreachable).
#[derive(Debug, Clone)]
pub struct Fleet {
    members: Vec<SshExecutor>,
    /// Each member's name: its inventory name, node-set member or inventory line.
    names: Vec<String>,
    concurrency: usize,
    per_host_timeout: Option<Duration>,
    batches: Batches,
    thresholds: Thresholds,
    retries: u32,
    retry_backoff: Duration,
    release_connections: bool,
}

/// Something that happened on one host, delivered while the fleet runs.
///
/// Each event carries the member's position in [`Fleet::members`]: names alone can be
/// ambiguous when several members share one (other ports or users on the same machine).
/// `host` is the member's [name](Fleet::names).
#[derive(Debug)]
#[non_exhaustive]
pub enum FleetEvent<'a> {
    /// A batch is about to start.
    #[non_exhaustive]
    BatchStarted {
        /// The batch's number, from 0.
        batch: usize,
        /// Its members' positions.
        members: Range<usize>,
    },
    /// The host's command is about to start (its connection may still be opening).
    #[non_exhaustive]
    Started {
        /// The host.
        host: &'a str,
        /// The member's position in [`Fleet::members`].
        member: usize,
    },
    /// A chunk of the host's output, as it arrived.
    #[non_exhaustive]
    Output {
        /// The host.
        host: &'a str,
        /// The member's position in [`Fleet::members`].
        member: usize,
        /// The chunk.
        chunk: &'a OutputChunk,
    },
    /// The host could not be reached before anything was sent; it is tried again after
    /// `delay`.
    #[non_exhaustive]
    Retrying {
        /// The host.
        host: &'a str,
        /// The member's position in [`Fleet::members`].
        member: usize,
        /// The attempt that failed, from 1.
        attempt: u32,
        /// Why.
        error: &'a Error,
        /// The backoff before the next attempt.
        delay: Duration,
    },
    /// The host finished (or failed, or ran out of time).
    #[non_exhaustive]
    Finished {
        /// Its result.
        result: &'a HostResult,
        /// The member's position in [`Fleet::members`].
        member: usize,
    },
    /// The host will not be started: a threshold or fail-fast stopped the rollout.
    #[non_exhaustive]
    Skipped {
        /// Which host, and why.
        skipped: &'a SkippedHost,
    },
}

/// The outcome on one host.
#[derive(Debug)]
#[non_exhaustive]
pub struct HostResult {
    /// The address connected to (the executor's host).
    pub host: String,
    /// The member's name ([`Fleet::names`]).
    pub name: String,
    /// The SSH port.
    pub port: u16,
    /// The login user.
    pub user: String,
    /// The member's position in [`Fleet::members`].
    pub member: usize,
    /// The batch it ran in, from 0.
    pub batch: usize,
    /// Connection attempts: more than 1 only when an unreachable host was retried.
    pub attempts: u32,
    /// The command's execution (exit code or signal, output, duration), or why there is none
    /// (connection refused, authentication, the per-host deadline, ...), of the last attempt.
    pub outcome: Result<Execution>,
    /// What a [push](Fleet::push) did to each file on this host: written, or left alone
    /// because it already had the content, owner, group and mode the push would give it
    /// ([`FileChange::Unchanged`]). `None` for other operations, and where the push failed.
    pub pushed: Option<PushedFiles>,
    /// When the first attempt started, after the run started.
    pub started: Duration,
    /// Wall time for this host, connection, every attempt and backoff included.
    pub duration: Duration,
}

/// A host that was never started.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedHost {
    /// The address it would have connected to.
    pub host: String,
    /// The member's name.
    pub name: String,
    /// The SSH port.
    pub port: u16,
    /// The login user.
    pub user: String,
    /// The member's position in [`Fleet::members`].
    pub member: usize,
    /// Why it was not started.
    pub reason: String,
}

impl HostResult {
    /// `true` when the command ran and exited 0.
    pub fn success(&self) -> bool {
        matches!(&self.outcome, Ok(e) if e.status.success())
    }

    /// The classified outcome.
    pub fn status(&self) -> HostStatus {
        HostStatus::of(&self.outcome)
    }

    /// A short status word for tables: `ok`, `exit N`, `signal S`, `timeout`, `may have run`
    /// (the connection broke while the command ran: [`Error::ConnectionLost`]), `error`
    /// (the command could not be run: connection refused, authentication, ...). See
    /// [`status`](Self::status) for the finer classification.
    pub fn status_text(&self) -> String {
        match &self.outcome {
            Ok(execution) => match &execution.status {
                ExitStatus::Code(0) => "ok".to_owned(),
                ExitStatus::Code(code) => format!("exit {code}"),
                ExitStatus::Signal { name, .. } => format!("signal {name}"),
                ExitStatus::TimedOut { .. } => "timeout".to_owned(),
                _ => "unknown".to_owned(),
            },
            Err(Error::Timeout { .. }) => "timeout".to_owned(),
            Err(Error::ConnectionLost { .. } | Error::RunnerLost { .. }) => {
                "may have run".to_owned()
            }
            Err(_) => "error".to_owned(),
        }
    }
}

/// All hosts' results, in the order the hosts were given.
#[derive(Debug)]
#[non_exhaustive]
pub struct FleetReport {
    /// One result per host that was started, in member order.
    pub results: Vec<HostResult>,
    /// The hosts that were not started, in member order.
    pub skipped: Vec<SkippedHost>,
    /// Why the rollout stopped: a batch over its failure threshold, or fail-fast after a
    /// failure (`None`: neither). Set even when nothing was left to skip (in the last batch).
    pub stopped: Option<String>,
    /// Wall time for the whole run.
    pub duration: Duration,
}

/// Counts over a [`FleetReport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FleetSummary {
    /// Hosts where the command exited 0.
    pub succeeded: usize,
    /// Hosts where the command ran and failed (nonzero exit, signal).
    pub failed: usize,
    /// Hosts where the command or the connection ran out of time.
    pub timed_out: usize,
    /// Hosts whose connection broke while the command was running
    /// ([`Error::ConnectionLost`]: server killed, restarted or taken off the network): the
    /// command may have run, partly or completely. It is never re-sent.
    pub may_have_run: usize,
    /// Hosts that could not run the command (connection, authentication, other errors),
    /// host-key refusals excepted.
    pub unreachable: usize,
    /// Hosts whose host key was refused (unknown, changed, revoked): counted apart, since an
    /// operator has to act on each.
    pub host_key_refused: usize,
    /// Hosts not started because a threshold or fail-fast stopped the rollout.
    pub skipped: usize,
}

impl FleetReport {
    /// Counts successes, failures, timeouts, lost connections, unreachable, refused and
    /// skipped hosts.
    pub fn summary(&self) -> FleetSummary {
        let mut summary = FleetSummary {
            skipped: self.skipped.len(),
            ..FleetSummary::default()
        };
        for result in &self.results {
            match &result.outcome {
                Ok(e) if e.status.success() => summary.succeeded += 1,
                Ok(Execution {
                    status: ExitStatus::TimedOut { .. },
                    ..
                })
                | Err(Error::Timeout { .. }) => summary.timed_out += 1,
                Ok(_) => summary.failed += 1,
                Err(Error::ConnectionLost { .. } | Error::RunnerLost { .. }) => {
                    summary.may_have_run += 1
                }
                Err(_) if matches!(result.status(), HostStatus::HostKeyRefused(_)) => {
                    summary.host_key_refused += 1;
                }
                Err(_) => summary.unreachable += 1,
            }
        }
        summary
    }

    /// Every host's status, started or skipped, in member order.
    pub fn statuses(&self) -> Vec<(usize, HostStatus)> {
        let mut statuses: Vec<(usize, HostStatus)> = self
            .results
            .iter()
            .map(|r| (r.member, r.status()))
            .chain(self.skipped.iter().map(|s| (s.member, HostStatus::Skipped)))
            .collect();
        statuses.sort_by_key(|(member, _)| *member);
        statuses
    }

    /// One [`HostRecord`] per host, skipped ones included, in member order. With
    /// `digests_only`, outputs are left out and only their SHA-256 kept.
    pub fn records(&self, digests_only: bool) -> Vec<HostRecord> {
        let mut records: Vec<HostRecord> = self
            .results
            .iter()
            .map(|r| HostRecord::from_result(r, digests_only))
            .chain(self.skipped.iter().map(HostRecord::from_skipped))
            .collect();
        records.sort_by_key(|r| r.member);
        records
    }

    /// The output gathered as `clush -b` shows it (see [`fold_records`]).
    pub fn fold(&self) -> Vec<FoldedGroup> {
        fold_records(&self.records(false))
    }

    /// The run's exit code (the policy is in [`record`]'s docs: 0 all ok, 1 a command
    /// failed, 3 unknown outcome, 4 unreachable, 5 host key refused, 6 hosts skipped).
    pub fn exit_code(&self) -> u8 {
        exit_code(self.statuses().iter().map(|(_, s)| s))
    }

    /// Writes the failed-hosts file (see [`write_failed_hosts`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when it cannot be written.
    pub fn write_failed_hosts(&self, path: &Path) -> Result<()> {
        write_failed_hosts(path, &self.records(true))
    }
}

/// The part of a per-host deadline kept for killing a command that runs over it:
/// `kill_grace` (TERM to KILL) + 0.5 s, at most a quarter of the deadline.
fn kill_reserve(limit: Duration, kill_grace: Duration) -> Duration {
    kill_grace
        .saturating_add(Duration::from_millis(500))
        .min(limit / 4)
}

/// A host's output as the fleet saw it, for a result made at the deadline: the chunks up to
/// `max_output_bytes` bytes (all of them without a cap); from the first chunk that does not
/// fit on, everything is counted as omitted (a head, where the executor keeps head + tail).
struct Seen {
    cap: Option<usize>,
    chunks: Vec<OutputChunk>,
    kept: usize,
    omitted: u64,
}

impl Seen {
    fn new(cap: Option<usize>) -> Self {
        Self {
            cap,
            chunks: Vec::new(),
            kept: 0,
            omitted: 0,
        }
    }

    fn push(&mut self, chunk: &OutputChunk) {
        let len = chunk.bytes().len();
        if self.omitted > 0 || self.cap.is_some_and(|cap| self.kept + len > cap) {
            self.omitted += len as u64;
        } else {
            self.kept += len;
            self.chunks.push(chunk.clone());
        }
    }

    /// A command that was still running (or being killed) at the deadline.
    fn timed_out(&mut self, host: &str, limit: Duration, duration: Duration) -> Execution {
        Execution {
            host: host.to_owned(),
            omitted_at: self.chunks.len(),
            chunks: std::mem::take(&mut self.chunks),
            status: ExitStatus::TimedOut {
                timeout: limit,
                confirmed_dead: false,
            },
            duration,
            omitted_bytes: self.omitted,
        }
    }
}

/// One line of an inventory file: `[user@]host[:port]`.
fn parse_inventory_line(line: &str) -> Option<(Option<&str>, &str, Option<u16>)> {
    let line = line.split('#').next()?.trim();
    if line.is_empty() {
        return None;
    }
    let (user, rest) = match line.split_once('@') {
        Some((user, rest)) => (Some(user), rest),
        None => (None, line),
    };
    // `[v6::addr]:port` or `host:port`; a bare IPv6 address has several colons.
    if let Some(inner) = rest.strip_prefix('[') {
        let (host, after) = inner.split_once(']')?;
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok());
        return Some((user, host, port));
    }
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((user, host, port.parse().ok())),
        _ => Some((user, rest, None)),
    }
}

impl Fleet {
    /// A fleet of already-configured executors (one per host), each named by its host.
    pub fn new(members: impl IntoIterator<Item = SshExecutor>) -> Self {
        let members: Vec<SshExecutor> = members.into_iter().collect();
        let names = members.iter().map(|m| m.host().to_owned()).collect();
        Self::with_names(members, names)
    }

    /// A fleet of named executors: the names head folded output, records and failed-hosts
    /// files (`web01`, where the address may be `10.1.0.1`).
    pub fn named(members: impl IntoIterator<Item = (String, SshExecutor)>) -> Self {
        let (names, members) = members.into_iter().unzip();
        Self::with_names(members, names)
    }

    fn with_names(members: Vec<SshExecutor>, names: Vec<String>) -> Self {
        Self {
            members,
            names,
            concurrency: 16,
            per_host_timeout: None,
            batches: Batches::default(),
            thresholds: Thresholds::default(),
            retries: 0,
            retry_backoff: Duration::from_secs(1),
            release_connections: false,
        }
    }

    /// One executor per host name, each from `template` with its host replaced. Connections
    /// open lazily, inside each host's deadline.
    ///
    /// # Errors
    /// Invalid settings in `template`.
    pub fn from_hosts(
        hosts: impl IntoIterator<Item = impl Into<String>>,
        template: &SshExecutorBuilder,
    ) -> Result<Self> {
        let members = hosts
            .into_iter()
            .map(|host| template.clone().host(host).build_lazy())
            .collect::<Result<Vec<_>>>()?;
        Ok(Self::new(members))
    }

    /// One executor per member of a node set (`web[01-20]!web07`, see [`expand_nodeset`]),
    /// each from `template` with its host replaced.
    ///
    /// # Errors
    /// A bad node set ([`Error::InvalidInput`]) or invalid settings in `template`.
    pub fn from_nodeset(expression: &str, template: &SshExecutorBuilder) -> Result<Self> {
        Self::from_hosts(expand_nodeset(expression)?, template)
    }

    /// Reads a plain host list: one `[user@]host[:port]` per line, `#` comments and blank
    /// lines ignored. Values on a line override `template`. Each member is named by its line
    /// (`ci@web-2:2222`), so a failed-hosts file written after a run reads back here.
    ///
    /// # Errors
    /// An unreadable file ([`Error::InvalidInput`]) or invalid settings.
    pub fn from_inventory(path: &Path, template: &SshExecutorBuilder) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::InvalidInput {
            reason: format!("cannot read inventory {}: {e}", path.display()),
        })?;
        let mut members = Vec::new();
        for line in text.lines() {
            let Some((user, host, port)) = parse_inventory_line(line) else {
                continue;
            };
            let mut builder = template.clone().host(host);
            if let Some(user) = user {
                builder = builder.user(user);
            }
            if let Some(port) = port {
                builder = builder.port(port);
            }
            let name = line.split('#').next().unwrap_or_default().trim().to_owned();
            members.push((name, builder.build_lazy()?));
        }
        Ok(Self::named(members))
    }

    /// The hosts of an Ansible inventory that `pattern` selects (`web:&prod:!canary`, see
    /// [`Inventory::select`]), named by their inventory names, each from `template` with
    /// its connection variables applied ([`InventoryHost::configure`]: `ansible_host`,
    /// `ansible_port`, `ansible_user`, `ansible_ssh_private_key_file` and what the ssh args
    /// carry).
    ///
    /// # Errors
    /// A pattern term that matches nothing, a bad `ansible_port`, invalid settings.
    pub fn from_ansible(
        inventory: &Inventory,
        pattern: &str,
        template: &SshExecutorBuilder,
    ) -> Result<Self> {
        Self::from_inventory_hosts(&inventory.select(pattern)?, template)
    }

    /// One executor per inventory host (from [`Inventory::select`], perhaps narrowed by
    /// [`Inventory::limit`]).
    ///
    /// # Errors
    /// A bad `ansible_port` or ssh args, invalid settings.
    pub fn from_inventory_hosts(
        hosts: &[InventoryHost],
        template: &SshExecutorBuilder,
    ) -> Result<Self> {
        let members = hosts
            .iter()
            .map(|host| {
                let (builder, warnings) =
                    host.configure(template.clone().host(host.address()), None)?;
                for warning in warnings {
                    tracing::warn!("inventory: {warning}");
                }
                Ok((host.name.clone(), builder.build_lazy()?))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self::named(members))
    }

    /// One executor per alias of an OpenSSH client configuration that was parsed once
    /// ([`SshConfig::load`]): resolving an alias does not read the file again. Each member is
    /// named by its alias.
    ///
    /// # Errors
    /// As [`SshConfig::resolve`] and [`HostConfig::to_builder`](crate::HostConfig::to_builder).
    pub fn from_ssh_config(
        config: &SshConfig,
        aliases: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Self> {
        let members = aliases
            .into_iter()
            .map(|alias| {
                let alias = alias.into();
                let executor = config.resolve(&alias)?.to_builder()?.build_lazy()?;
                Ok((alias, executor))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self::named(members))
    }

    /// Keeps shard `index` of `count` (0-based): a split by a hash of each member's name,
    /// stable across runs and machines, so `count` runners together cover every host once.
    /// Their [records](FleetReport::records) fold into one report with [`fold_records`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `index` is not below `count`.
    pub fn shard(self, index: usize, count: usize) -> Result<Self> {
        if index >= count {
            return Err(Error::InvalidInput {
                reason: format!("shard {index} of {count}: the index must be below the count"),
            });
        }
        let (names, members) = self
            .names
            .iter()
            .zip(&self.members)
            .filter(|(name, _)| shard_of(name, count) == index)
            .map(|(name, member)| (name.clone(), member.clone()))
            .unzip();
        Ok(Self {
            names,
            members,
            ..self
        })
    }

    /// How many hosts run at once. Defaults to 16.
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Deadline per host and attempt, covering connecting, authenticating, the command and
    /// killing it: every host's result is reported by its deadline.
    ///
    /// The command gets the deadline minus a reserve for the kill as its timeout (the
    /// reserve is the executor's `kill_grace` + 0.5 s, at most a quarter of the deadline), so
    /// that a host over the deadline has its process group killed and its output collected
    /// in time: [`ExitStatus::TimedOut`] with the output so far. A host that does not even
    /// confirm the kill by the deadline (a frozen or silent server) is reported at the
    /// deadline the same way, with `confirmed_dead: false` and the output seen so far.
    /// Defaults to `None` (commands use their executor's default timeout). A deadline too
    /// far away for the clock to hold (`Duration::MAX`) is no deadline.
    #[must_use]
    pub fn per_host_timeout(mut self, timeout: Duration) -> Self {
        self.per_host_timeout = Some(timeout);
        self
    }

    /// Rolling batches (Ansible's `serial`): `"1,10%,50%".parse()?` runs one host, then 10 %
    /// of the hosts, then half of them at a time. A batch starts only when the one before it
    /// is done. Defaults to one batch of every host.
    #[must_use]
    pub fn batches(mut self, batches: Batches) -> Self {
        self.batches = batches;
        self
    }

    /// After each batch, stop the rollout when more than `percent` % of that batch's hosts
    /// failed (Ansible's `max_fail_percentage`; `0`: any failure). Every status but `ok`
    /// counts as a failure, unreachable and host-key-refused hosts included; the hosts of
    /// later batches are reported as skipped. Defaults to no threshold.
    #[must_use]
    pub fn max_fail_percentage(mut self, percent: u8) -> Self {
        self.thresholds.max_fail_percentage = Some(percent.min(100));
        self
    }

    /// Stop at the first failure (pdsh `-k`, Ansible's `any_errors_fatal`): hosts not yet
    /// started are skipped, hosts already running finish. Defaults to `false`.
    #[must_use]
    pub fn fail_fast(mut self, fail_fast: bool) -> Self {
        self.thresholds.fail_fast = fail_fast;
        self
    }

    /// Retry hosts that could not be reached ([`HostStatus::Unreachable`]: nothing was sent)
    /// up to `times` more times, waiting `backoff`, then twice as long each time (at most 30 s).
    /// A host whose command may have run (a timeout, a lost connection) is never retried,
    /// nor is a refused host key or refused credentials. Each attempt has the whole
    /// [`per_host_timeout`](Self::per_host_timeout). Defaults to no retries.
    #[must_use]
    pub fn retry_unreachable(mut self, times: u32, backoff: Duration) -> Self {
        self.retries = times;
        self.retry_backoff = backoff;
        self
    }

    /// Let each host's connections go as soon as its result is in (idle ones are
    /// disconnected; the executor stays usable and dials again for its next command). With
    /// it a run holds about [`concurrency`](Self::concurrency) connections, sockets and
    /// server processes at a time, whatever the number of hosts: sshd keeps a process or two
    /// per connection, so 10,000 pooled connections on one server are 10,000 or more sshd
    /// processes. Defaults to `false`: every host's connection stays pooled until its
    /// executor is dropped, so a second run on the same fleet connects no one again.
    #[must_use]
    pub fn release_connections(mut self, release: bool) -> Self {
        self.release_connections = release;
        self
    }

    /// Escalates every host's commands, copies and jobs with `escalation` (sudo, doas or su;
    /// see [`Become`](crate::Become)): each member becomes a handle on its own pool that
    /// escalates. A host whose escalation fails is
    /// [`BecomeFailed`](HostStatus::BecomeFailed) (`become_failed` in records), a failure
    /// for thresholds and never retried. Defaults to what each member's builder set (none
    /// unless its template had [`with_become`](crate::SshExecutorBuilder::with_become)).
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) for a target user or flag that could change
    /// the exec request.
    pub fn with_become(mut self, escalation: crate::config::Become) -> Result<Self> {
        self.members = self
            .members
            .iter()
            .map(|member| member.with_become(escalation.clone()))
            .collect::<Result<_>>()?;
        Ok(self)
    }

    /// Makes sure this process may open the descriptors a run needs (those open now, one
    /// socket per connection held at once, and 64 more): raises the soft `RLIMIT_NOFILE`
    /// when it is lower, up to the hard limit. [`run`](Self::run) calls it first; call it
    /// yourself to get the error before the run. Returns the soft limit in force.
    ///
    /// # Errors
    /// [`Error::DescriptorLimit`] when the hard limit is too low (run fewer hosts at once,
    /// or [release](Self::release_connections) connections as results come in).
    pub fn ensure_descriptor_limit(&self) -> Result<u64> {
        let connections = if self.release_connections {
            // Those running, and those of finished hosts still closing.
            self.concurrency.saturating_mul(2).min(self.members.len())
        } else {
            self.members.len()
        };
        descriptors::ensure(descriptors::needed(connections))
    }

    /// The hosts' executors.
    pub fn members(&self) -> &[SshExecutor] {
        &self.members
    }

    /// The hosts' names, one per member.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    fn name(&self, member: usize) -> &str {
        self.names.get(member).map_or("", String::as_str)
    }

    fn skipped(&self, member: usize, reason: &str) -> Option<SkippedHost> {
        let executor = self.members.get(member)?;
        Some(SkippedHost {
            host: executor.host().to_owned(),
            name: self.name(member).to_owned(),
            port: executor.port(),
            user: executor.inner.config.user.clone(),
            member,
            reason: reason.to_owned(),
        })
    }

    /// Runs `command` on every host, batch after batch, calling `on_event` as batches start
    /// and hosts start, stream output, are retried, finish or are skipped; returns every
    /// host's result in the order the hosts were given.
    ///
    /// # Cancel safety
    /// Dropping the future drops every host's command, which kills their process groups.
    pub async fn run(&self, command: &str, on_event: impl FnMut(FleetEvent<'_>)) -> FleetReport {
        self.rollout(
            |index, executor, events| self.attempt(executor, command, index, events),
            on_event,
        )
        .await
    }

    /// One attempt on one host, bounded by the per-host deadline.
    async fn attempt(
        &self,
        executor: &SshExecutor,
        command: &str,
        index: usize,
        tx: mpsc::UnboundedSender<Message>,
    ) -> Result<Execution> {
        let began = tokio::time::Instant::now();
        let timeout = self.per_host_timeout;
        let config = &executor.inner.config;
        let options = ExecOptions {
            timeout: timeout
                .map(|limit| limit.saturating_sub(kill_reserve(limit, config.kill_grace))),
            ..ExecOptions::default()
        };
        // What the host sent, for a result at the deadline (the executor's own result is
        // lost when its future is dropped there).
        let mut seen = Seen::new(config.max_output_bytes);
        let mut sink = |chunk: &OutputChunk| {
            if timeout.is_some() {
                seen.push(chunk);
            }
            let _ = tx.send(Message::Output(index, chunk.clone()));
        };
        let work = executor.execute(command, options, &mut sink);
        match timeout {
            // The command's own timeout kills it a little before the deadline; this bound
            // catches a kill (or a connection) the server never completes. Dropping `work`
            // kills the group in the background.
            // A deadline too far for the clock never passes: none.
            Some(limit) => match limit::within(limit::deadline(began, limit), work).await {
                Some(outcome) => outcome,
                None => Ok(seen.timed_out(executor.host(), limit, began.elapsed())),
            },
            None => work.await,
        }
    }
}

/// What a host's task tells the event loop.
enum Message {
    Started(usize),
    Output(usize, OutputChunk),
    Retrying(usize, u32, Error, Duration),
}

/// The wait after failed attempt `attempt` (from 1): `base`, doubled each time, at most 30 s.
fn backoff(base: Duration, attempt: u32) -> Duration {
    base.saturating_mul(1 << attempt.saturating_sub(1).min(16))
        .min(Duration::from_secs(30))
}

/// The shard a name falls in: SHA-256, not std's hasher, whose output may change between
/// Rust releases and would move hosts between shards.
fn shard_of(name: &str, count: usize) -> usize {
    let digest = Sha256::digest(name.as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(digest.get(..8).unwrap_or(&[0; 8]));
    (u64::from_be_bytes(head) % count.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::{OutputChunk, Seen, backoff, kill_reserve, parse_inventory_line, shard_of};
    use crate::command::ExitStatus;

    #[test]
    fn the_kill_reserve_fits_in_the_deadline() {
        let second = Duration::from_secs(1);
        assert_eq!(
            kill_reserve(60 * second, second),
            Duration::from_millis(1500)
        );
        assert_eq!(
            kill_reserve(8 * second, second),
            Duration::from_millis(1500)
        );
        assert_eq!(kill_reserve(2 * second, second), Duration::from_millis(500));
        assert_eq!(
            kill_reserve(60 * second, Duration::ZERO),
            Duration::from_millis(500)
        );
        assert_eq!(kill_reserve(Duration::ZERO, second), Duration::ZERO);
    }

    #[test]
    fn a_result_at_the_deadline_keeps_the_output_seen() {
        let mut seen = Seen::new(Some(4));
        seen.push(&OutputChunk::Stdout(Bytes::from_static(b"abc")));
        seen.push(&OutputChunk::Stderr(Bytes::from_static(b"de")));
        seen.push(&OutputChunk::Stdout(Bytes::from_static(b"f")));
        let execution = seen.timed_out("h", Duration::from_secs(2), Duration::from_secs(2));
        // The head only: nothing after the first chunk that did not fit.
        assert_eq!(execution.stdout(), b"abc");
        assert_eq!(execution.stderr(), b"");
        assert_eq!((execution.omitted_bytes, execution.omitted_at), (3, 1));
        assert_eq!(
            execution.status,
            ExitStatus::TimedOut {
                timeout: Duration::from_secs(2),
                confirmed_dead: false
            }
        );
        let mut uncapped = Seen::new(None);
        uncapped.push(&OutputChunk::Stderr(Bytes::from_static(b"de")));
        let execution = uncapped.timed_out("h", Duration::ZERO, Duration::ZERO);
        assert_eq!(
            (execution.stderr(), execution.omitted_bytes),
            (b"de".to_vec(), 0)
        );
    }

    #[test]
    fn retry_backoff_doubles_up_to_thirty_seconds() {
        let base = Duration::from_millis(500);
        let waits: Vec<u64> = (1..=8)
            .map(|a| backoff(base, a).as_millis() as u64)
            .collect();
        assert_eq!(waits, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        assert_eq!(backoff(base, u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn shards_are_fixed_by_name() {
        // Fixed values: a change here moves hosts between the shards of running fleets.
        // (The first 8 bytes of SHA-256, big-endian, modulo the count.)
        let shards: Vec<usize> = ["web01", "web02", "db1", "web03"]
            .iter()
            .map(|n| shard_of(n, 4))
            .collect();
        assert_eq!(shards, [0, 0, 3, 3]);
        assert_eq!(shard_of("anything", 1), 0);
    }

    #[test]
    fn inventory_lines() {
        assert_eq!(parse_inventory_line("  # comment"), None);
        assert_eq!(parse_inventory_line(""), None);
        assert_eq!(parse_inventory_line("web-1"), Some((None, "web-1", None)));
        assert_eq!(
            parse_inventory_line("ci@web-2:2222 # build box"),
            Some((Some("ci"), "web-2", Some(2222)))
        );
        assert_eq!(
            parse_inventory_line("[::1]:2200"),
            Some((None, "::1", Some(2200)))
        );
        assert_eq!(
            parse_inventory_line("fe80::1"),
            Some((None, "fe80::1", None))
        );
    }
}
