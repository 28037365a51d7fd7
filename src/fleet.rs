//! Running one command on many hosts: bounded concurrency, a deadline per host, live output
//! per host, and a per-host result with a summary.

use std::{path::Path, time::Duration};

use futures::StreamExt;
use tokio::sync::mpsc;

use crate::{
    builder::SshExecutorBuilder,
    command::{Execution, ExitStatus, OutputChunk},
    config::limit,
    error::{Error, Result},
    executor::{ExecOptions, SshExecutor},
};

/// Runs commands on a set of hosts. One slow or dead host never holds up the others: each
/// host has its own deadline and at most [`concurrency`](Fleet::concurrency) hosts run at
/// once.
#[derive(Debug, Clone)]
pub struct Fleet {
    members: Vec<SshExecutor>,
    concurrency: usize,
    per_host_timeout: Option<Duration>,
}

/// Something that happened on one host, delivered while the fleet runs.
///
/// Each event carries the member's position in [`Fleet::members`]: host names alone are
/// ambiguous when several members share one (other ports or users on the same machine).
#[derive(Debug)]
#[non_exhaustive]
pub enum FleetEvent<'a> {
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
    /// The host finished (or failed, or ran out of time).
    #[non_exhaustive]
    Finished {
        /// Its result.
        result: &'a HostResult,
        /// The member's position in [`Fleet::members`].
        member: usize,
    },
}

/// The outcome on one host.
#[derive(Debug)]
#[non_exhaustive]
pub struct HostResult {
    /// The host.
    pub host: String,
    /// The command's execution (exit code or signal, output, duration), or why there is none
    /// (connection refused, authentication, the per-host deadline, ...).
    pub outcome: Result<Execution>,
    /// Wall time for this host, connection included.
    pub duration: Duration,
}

impl HostResult {
    /// `true` when the command ran and exited 0.
    pub fn success(&self) -> bool {
        matches!(&self.outcome, Ok(e) if e.status.success())
    }

    /// A short status word for tables: `ok`, `exit N`, `signal S`, `timeout`, `may have run`
    /// (the connection broke while the command ran: [`Error::ConnectionLost`]), `error`
    /// (the command could not be run: connection refused, authentication, ...).
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
            Err(Error::ConnectionLost { .. }) => "may have run".to_owned(),
            Err(_) => "error".to_owned(),
        }
    }
}

/// All hosts' results, in the order the hosts were given.
#[derive(Debug)]
#[non_exhaustive]
pub struct FleetReport {
    /// One result per host.
    pub results: Vec<HostResult>,
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
    /// Hosts that could not run the command (connection, authentication, host key).
    pub unreachable: usize,
}

impl FleetReport {
    /// Counts successes, failures, timeouts, lost connections and unreachable hosts.
    pub fn summary(&self) -> FleetSummary {
        let mut summary = FleetSummary::default();
        for result in &self.results {
            match &result.outcome {
                Ok(e) if e.status.success() => summary.succeeded += 1,
                Ok(Execution {
                    status: ExitStatus::TimedOut { .. },
                    ..
                })
                | Err(Error::Timeout { .. }) => summary.timed_out += 1,
                Ok(_) => summary.failed += 1,
                Err(Error::ConnectionLost { .. }) => summary.may_have_run += 1,
                Err(_) => summary.unreachable += 1,
            }
        }
        summary
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
    /// A fleet of already-configured executors (one per host).
    pub fn new(members: impl IntoIterator<Item = SshExecutor>) -> Self {
        Self {
            members: members.into_iter().collect(),
            concurrency: 16,
            per_host_timeout: None,
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

    /// Reads an inventory file: one `[user@]host[:port]` per line, `#` comments and blank
    /// lines ignored. Values on a line override `template`.
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
            members.push(builder.build_lazy()?);
        }
        Ok(Self::new(members))
    }

    /// How many hosts run at once. Defaults to 16.
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Deadline per host, covering connecting, authenticating, the command and killing it:
    /// every host's result is reported by its deadline.
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

    /// The hosts' executors.
    pub fn members(&self) -> &[SshExecutor] {
        &self.members
    }

    /// Runs `command` on every host, calling `on_event` as hosts start, stream output and
    /// finish, and returns every host's result in the order the hosts were given.
    ///
    /// # Cancel safety
    /// Dropping the future drops every host's command, which kills their process groups.
    pub async fn run(
        &self,
        command: &str,
        mut on_event: impl FnMut(FleetEvent<'_>),
    ) -> FleetReport {
        let started = std::time::Instant::now();
        let (tx, mut rx) = mpsc::unbounded_channel::<(usize, OutputChunk)>();
        let timeout = self.per_host_timeout;
        let mut runs = futures::stream::iter(self.members.iter().enumerate())
            .map(move |(index, executor)| {
                let tx = tx.clone();
                async move {
                    let began = tokio::time::Instant::now();
                    let config = &executor.inner.config;
                    let options = ExecOptions {
                        timeout: timeout.map(|limit| {
                            limit.saturating_sub(kill_reserve(limit, config.kill_grace))
                        }),
                        ..ExecOptions::default()
                    };
                    // What the host sent, for a result at the deadline (the executor's own
                    // result is lost when its future is dropped there).
                    let mut seen = Seen::new(config.max_output_bytes);
                    let mut sink = |chunk: &OutputChunk| {
                        if timeout.is_some() {
                            seen.push(chunk);
                        }
                        let _ = tx.send((index, chunk.clone()));
                    };
                    let work = executor.execute(command, options, &mut sink);
                    let outcome = match timeout {
                        // The command's own timeout kills it a little before the deadline;
                        // this bound catches a kill (or a connection) the server never
                        // completes. Dropping `work` kills the group in the background.
                        // A deadline too far for the clock never passes: none.
                        Some(limit) => {
                            match limit::within(limit::deadline(began, limit), work).await {
                                Some(outcome) => outcome,
                                None => Ok(seen.timed_out(executor.host(), limit, began.elapsed())),
                            }
                        }
                        None => work.await,
                    };
                    (
                        index,
                        HostResult {
                            host: executor.host().to_owned(),
                            outcome,
                            duration: began.elapsed(),
                        },
                    )
                }
            })
            .buffer_unordered(self.concurrency);

        let mut results: Vec<Option<HostResult>> = (0..self.members.len()).map(|_| None).collect();
        let mut started_hosts = 0;
        let mut announce = |on_event: &mut dyn FnMut(FleetEvent<'_>), upto: usize| {
            while started_hosts < upto.min(self.members.len()) {
                if let Some(member) = self.members.get(started_hosts) {
                    on_event(FleetEvent::Started {
                        host: member.host(),
                        member: started_hosts,
                    });
                }
                started_hosts += 1;
            }
        };
        announce(&mut on_event, self.concurrency);
        let mut finished = 0;
        loop {
            tokio::select! {
                biased;
                Some((index, chunk)) = rx.recv() => {
                    if let Some(member) = self.members.get(index) {
                        on_event(FleetEvent::Output { host: member.host(), member: index, chunk: &chunk });
                    }
                }
                next = runs.next() => match next {
                    Some((index, result)) => {
                        // Output sent before the result must be reported first.
                        while let Ok((i, chunk)) = rx.try_recv() {
                            if let Some(member) = self.members.get(i) {
                                on_event(FleetEvent::Output { host: member.host(), member: i, chunk: &chunk });
                            }
                        }
                        on_event(FleetEvent::Finished { result: &result, member: index });
                        if let Some(slot) = results.get_mut(index) {
                            *slot = Some(result);
                        }
                        finished += 1;
                        announce(&mut on_event, finished + self.concurrency);
                    }
                    None => break,
                },
            }
        }
        FleetReport {
            results: results.into_iter().flatten().collect(),
            duration: started.elapsed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::{OutputChunk, Seen, kill_reserve, parse_inventory_line};
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
