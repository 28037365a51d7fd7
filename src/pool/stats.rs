//! [`PoolStats`]: what the pool looks like right now, and what it has done.

use std::time::Duration;

/// A snapshot of the pool, from [`SshExecutor::pool_stats`](crate::SshExecutor::pool_stats).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PoolStats {
    /// Open connections.
    pub connections: usize,
    /// Open connections that take no new commands and close once their running commands
    /// end: they reached the maximum lifetime, or are being recycled.
    pub retiring_connections: usize,
    /// Channel slots placed on connections (busy plus idle).
    pub slots: u32,
    /// Slots idle in the pool.
    pub idle_slots: u32,
    /// Commands running right now.
    pub busy_slots: u32,
    /// Connections dialed so far.
    pub dials: u64,
    /// Dials that failed (each attempt counts).
    pub dial_failures: u64,
    /// Failed dials that were tried again (transient failures, such as a restarting server).
    pub dial_retries: u64,
    /// Commands started again on another channel or connection because the first attempt
    /// failed before their exec request could have reached the server (see
    /// [`SshExecutor::execute`](crate::SshExecutor::execute)).
    pub command_retries: u64,
    /// Connections closed (dead, retired or idle).
    pub connections_closed: u64,
    /// Channel opens the server refused and that were retried.
    pub channel_open_retries: u64,
    /// Channel opens the server refused (retried or not).
    pub channel_open_refusals: u64,
    /// Connections replaced after many refused channel opens (russh keeps about 0.5 KiB per
    /// refusal until the connection closes).
    pub connections_recycled: u64,
    /// Commands started.
    pub commands: u64,
    /// Commands sent in the direct form: the login shell ran the bootstrap itself, one
    /// `/bin/sh` exec fewer on the server (see [`SshExecutor::execute`](crate::SshExecutor::execute)).
    pub direct_requests: u64,
    /// Direct requests the login shell did not run (no marker came back); each was run again
    /// in the universal form, which its connection then keeps to.
    pub direct_fallbacks: u64,
    /// Remote process groups killed (timeouts and cancellations).
    pub kills: u64,
    /// Session channels open right now: commands', kill channels and spares (not SFTP).
    pub open_channels: u32,
    /// Spare channels open and unused right now (see
    /// [`spare_channels`](crate::SshExecutorBuilder::spare_channels)).
    pub spare_channels: usize,
    /// Spare channels opened so far.
    pub spare_channels_opened: u64,
    /// Commands that started on a spare channel, without a channel-open round trip.
    pub spare_channels_used: u64,
    /// Of those, commands whose spare was pre-started: its login shell was already running
    /// and waiting for the command (connections that take the direct exec form).
    pub prestarted_spares_used: u64,
    /// Streams of port forwards open right now ([`SshExecutor::forward_local`](crate::SshExecutor::forward_local) and the others): each is one
    /// `direct-tcpip` or `forwarded-tcpip` channel on a connection of the forwards' own.
    pub forward_streams: u64,
    /// Streams of port forwards opened so far.
    pub forward_streams_opened: u64,
    /// Streams of port forwards that failed: the server refused the channel (the target
    /// refused the connection, forwarding is not allowed) or its connection was lost.
    pub forward_stream_failures: u64,
    /// Connections open for port forwards (not counted in `connections`: they carry no
    /// commands).
    pub forward_connections: usize,
    /// Of those, commands whose spare was pre-escalated: a shell started through their
    /// escalation tool (`sudo -n`, `doas -n`) was already waiting, so the tool did not run
    /// on the command's critical path (see the guide's [Become](crate::guide::escalation)).
    pub escalated_spares_used: u64,
    /// What the host's resident runner runs on (`perl 5.036000`), from the last runner
    /// that started; `None` while none has (see [`Runner`](crate::Runner)).
    pub runner: Option<String>,
    /// Resident runners started (one per connection that used one).
    pub runners_started: u64,
    /// Resident runners that ended while commands ran on them ([`Error::RunnerLost`](crate::Error::RunnerLost)).
    pub runners_lost: u64,
    /// Connections on which no resident runner could start: their commands ran per exec.
    pub runner_fallbacks: u64,
    /// Commands run through a resident runner.
    pub runner_commands: u64,
    /// Commands that ran under their limits or confinement (the runner took their guard).
    pub guarded_commands: u64,
    /// Guarded commands refused because their guard could not be enforced
    /// ([`Error::GuardUnavailable`](crate::Error::GuardUnavailable)); none of them ran.
    pub guard_refusals: u64,
    /// How long the account's login shell takes to start: the largest figure among the open
    /// connections, each measured on its first command (`None` before that). It includes the
    /// shell's start-up files (a `~/.bashrc` that runs `pyenv init` or `nvm`: see the guide's
    /// [Commands](crate::guide::commands#in-detail)) and about 1 ms of the executor's own; not
    /// the link's round trip. Every command that finds no pre-started spare pays it; at 50 ms
    /// or more the executor logs a warning once per connection.
    pub login_shell_startup: Option<Duration>,
    /// Slot checkouts that had to wait.
    pub waits: u64,
    /// Slot checkouts that timed out.
    pub wait_timeouts: u64,
    /// Total time spent waiting for slots.
    pub wait_time: Duration,
}
