//! A swiftide [`ToolExecutor`](swiftide_core::ToolExecutor) that runs commands and file
//! operations on a remote host over pooled SSH connections (pure Rust: russh, russh-sftp, bb8,
//! tokio), with the semantics of swiftide's own `LocalExecutor`: same results, same errors,
//! same live streaming.
//!
//! # Connecting
//!
//! ```no_run
//! # async fn demo() -> swiftide_ssh_executor::Result<()> {
//! use std::time::Duration;
//! use swiftide_ssh_executor::SshExecutor;
//!
//! let executor = SshExecutor::builder()
//!     .host("build-1.internal")
//!     .user("ci")
//!     .private_key_file("~/.ssh/id_ed25519")
//!     .known_hosts_file("~/.ssh/known_hosts")
//!     .workdir("/srv/checkout")
//!     .default_timeout(Some(Duration::from_secs(60)))
//!     .build()
//!     .await?;
//! let run = executor.run("cargo --version").await?;
//! println!("{:?}: {}", run.status, String::from_utf8_lossy(&run.stdout()));
//! # Ok(()) }
//! ```
//!
//! [`SshExecutorBuilder::build`] connects once, so a wrong host key, refused credentials or an
//! unreachable host fail right there with a typed [`Error`]; [`SshExecutorBuilder::build_lazy`]
//! defers that to the first command.
//!
//! # Authentication and host keys
//!
//! Key files (optionally encrypted), in-memory keys, OpenSSH user certificates
//! ([`certificate_file`](SshExecutorBuilder::certificate_file)), ssh-agent and passwords,
//! tried in the order added ([`AuthMethod`]). Secrets never appear in `Debug` output or logs.
//!
//! Host keys are verified against known_hosts by default ([`HostKeyPolicy::Strict`]):
//! patterns, negation, `[host]:port`, hashed entries and `@revoked` are understood; a file that
//! exists but cannot be read fails the connection. [`HostKeyPolicy::AcceptNew`] records unknown
//! hosts; only [`HostKeyPolicy::InsecureAcceptAnyHostKey`] skips verification. The host key is
//! checked before any credential or command is sent.
//!
//! # SSH config and jump hosts
//!
//! [`SshExecutor::from_ssh_config`] resolves a host alias through `~/.ssh/config` (patterns,
//! `Include`, `HostName`, `User`, `Port`, `IdentityFile`, `ProxyJump`, known-hosts files,
//! `StrictHostKeyChecking`, keepalives, `ConnectTimeout`; see [`SshConfig`] for the full list)
//! and returns a builder whose explicit settings win. [`JumpHost`]s chain connections through
//! `direct-tcpip` channels, each hop authenticated and host-key-checked on its own.
//!
//! # Running commands
//!
//! A command string runs exactly as `LocalExecutor` runs it, on the remote host: `sh -c
//! <command>` with stdin at EOF, no PTY, stdout and stderr separate and byte-exact; a string
//! starting with `#!` runs its interpreter (found through `PATH`, plus at most one argument)
//! with the rest of the text on stdin. `current_dir` and relative paths resolve against the
//! remote [`workdir`](SshExecutorBuilder::workdir); `env_clear`, `env_remove` and `envs` apply
//! in that order. Through swiftide, exit 0 is `Ok`, any other exit or a signal is
//! `NonZeroExit`, a timeout is `TimedOut` with the output so far, and transport or input
//! problems are `ExecutorError`. [`SshExecutor::run`] and [`SshExecutor::execute`] give the
//! exit code or signal, the duration and the host ([`Execution`]).
//!
//! The account's login shell runs first (sshd always uses it): its rc files run before each
//! command, and whatever they print is part of the output.
//!
//! # Timeouts, cancellation and killing
//!
//! sshd starts every command in a new session, so the command's shell leads its own process
//! group. The wrapper starts a supervisor in that group which reads the channel's stdin (the
//! command itself reads `/dev/null`, as under LocalExecutor). On timeout, and when an exec
//! future is dropped, the executor writes `K` on that line: the supervisor sends `SIGTERM` to
//! the whole group, waits up to [`kill_grace`](SshExecutorBuilder::kill_grace) (1 s by
//! default) for the leader to exit, then sends `SIGKILL` to the group. The executor drains the
//! remaining output for up to 2 s more and returns `TimedOut`. Background children die with the
//! group; a process that escaped it with `setsid` does not. The executor never relies on the
//! SSH `signal` request (OpenSSH refuses it for root logins) or on closing the channel (which
//! leaves a non-PTY command running).
//!
//! If the connection goes away while a command runs (the client process is killed, the
//! network breaks), sshd closes the pipe and the supervisor `SIGKILL`s the group at once
//! ([`kill_on_disconnect`](SshExecutorBuilder::kill_on_disconnect)); for a silent network cut
//! that happens when the server's sshd notices: with OpenSSH 9.2 about
//! 2 × `ClientAliveInterval` × (`ClientAliveCountMax` + 1), and only via TCP keepalive (hours)
//! when the server sets no `ClientAliveInterval`.
//! Shebang scripts with bodies over 48 KiB need stdin for the body: they are killed from a
//! second channel and have no disconnect kill.
//!
//! # Pooling
//!
//! Commands share connections through separate channels: up to
//! [`channels_per_connection`](SshExecutorBuilder::channels_per_connection) (8) per connection
//! and [`max_connections`](SshExecutorBuilder::max_connections) (4) connections; callers past
//! that wait up to [`pool_wait_timeout`](SshExecutorBuilder::pool_wait_timeout). Each command
//! drains its own channel in a task of its own, so one flooding or stalled command never
//! freezes the others on its connection. Keepalives detect dead peers; every network wait has
//! a deadline. A command is sent at most once: only failures before the exec request leaves
//! are retried, and a connection lost mid-command is [`Error::ConnectionLost`] ("may have
//! run"). See [`PoolStats`] and the `pool` module docs for the design.
//!
//! # Files
//!
//! `ReadFile` and `WriteFile` go over SFTP, one SFTP channel per pooled connection, reused
//! and replaced transparently when it breaks; no shell ever sees the path or the content.
//! Reads return the raw bytes (any size, binary-safe) as one chunk; writes create missing
//! parent directories and replace the file **atomically** (temporary file in the same
//! directory, then `posix-rename`), keep an existing file's permission bits and follow a
//! symlink to replace its target. Both keep several requests in flight (100 MiB moves at
//! roughly 1.5–2.5× `scp`'s speed on loopback). Errors read exactly like LocalExecutor's
//! (``failed to read from file `…`: No such file or directory (os error 2)``). Paths that are
//! not valid UTF-8 (which SFTP cannot carry) fall back to a quoted shell script. The same
//! operations, and more, are typed inherent methods: [`SshExecutor::read_file_bytes`],
//! [`write_file_bytes`](SshExecutor::write_file_bytes), [`metadata`](SshExecutor::metadata),
//! [`exists`](SshExecutor::exists), [`list_dir`](SshExecutor::list_dir),
//! [`create_dir_all`](SshExecutor::create_dir_all), [`remove_file`](SshExecutor::remove_file),
//! [`remove_dir_all`](SshExecutor::remove_dir_all) and [`rename`](SshExecutor::rename).
//!
//! # Streaming files
//!
//! `stream_files(root, extensions)` lists files with a remote `find -print0` and applies
//! LocalExecutor's selection rules on the client with the `ignore` crate's matcher (hidden
//! entries skipped, `.ignore` always, `.gitignore` and `.git/info/exclude` inside a git
//! repository, parent directories' ignore files, symlinks skipped, exact extension match),
//! then reads contents over SFTP, 16 at a time, as the consumer pulls. A relative root
//! resolves against the workdir. Errors are `Err` items and the stream goes on. The remote
//! host needs a `find` with `-mindepth` and `-print0` (GNU and BusyBox have both).
//!
//! # Fleets
//!
//! [`Fleet`] runs one command on many hosts with bounded concurrency and a deadline per host,
//! streams each host's output as it arrives ([`FleetEvent`]) and returns a [`HostResult`] per
//! host plus a [`FleetSummary`]; hosts come from executors, a list of names or an inventory
//! file.
//!
//! # Testbed
//!
//! The `swiftide-ssh-testbed` crate (in `testbed/`) starts real OpenSSH `sshd` processes on
//! loopback ports with throwaway keys; this crate's tests, examples and benchmarks use it,
//! and it works for your own integration tests.
//!
//! # Differences from `LocalExecutor`
//!
//! * The inherited environment is the sshd login environment, not the local process's.
//! * Spawn and `cd` errors read differently (the variant is the same).
//! * `SIGTERM` precedes `SIGKILL` (set `kill_grace(Duration::ZERO)` for LocalExecutor's
//!   immediate `SIGKILL`), and cancellation kills the remote group instead of leaving
//!   descendants behind.
//! * A shebang body larger than the pipe buffer does not fail with `EPIPE` when the
//!   interpreter exits early.
//! * A command containing a NUL byte is an `ExecutorError` (LocalExecutor reports the spawn
//!   error as `NonZeroExit`).
//! * `WriteFile` is atomic (a new inode: hard links, ACLs and xattrs do not carry over) and
//!   creates parent directories inside the command's timeout; a new file gets mode 0644.
//! * `stream_files` resolves a relative root against the workdir, not the local process's
//!   directory, and ignores git's global `core.excludesFile` (it lives on the client).
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, rust_2018_idioms, unreachable_pub)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod atomic_write;
mod auth;
mod builder;
mod error;
mod exec;
mod exec_fallback;
mod executor;
mod file_error;
mod fleet;
mod host_key;
mod ignore_rules;
mod jump;
mod known_hosts;
mod output;
mod pool;
mod remote_fs;
mod script;
mod session;
mod sftp;
mod shell;
mod ssh_config;
mod stream_files;
mod swiftide;

pub use auth::{AuthMethod, Secret};
pub use builder::SshExecutorBuilder;
pub use error::{Error, Phase, Result, SftpStatus};
pub use executor::{ExecOptions, SshExecutor};
pub use fleet::{Fleet, FleetEvent, FleetReport, FleetSummary, HostResult};
pub use host_key::HostKeyPolicy;
pub use jump::JumpHost;
pub use output::{Execution, ExitStatus, OutputChunk, OutputSink};
pub use pool::PoolStats;
pub use remote_fs::{DirEntry, FileMetadata, FileType};
pub use ssh_config::{HostConfig, SshConfig, StrictHostKeyChecking};

#[doc(hidden)]
pub use shell::exec_request_for_benchmarks;
