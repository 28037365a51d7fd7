//! A swiftide [`ToolExecutor`](swiftide_core::ToolExecutor) that runs commands and file
//! operations on a remote host over pooled SSH connections (pure Rust: russh, russh-sftp, bb8,
//! tokio), with the semantics of swiftide's own `LocalExecutor`: same results, same errors,
//! same live streaming.
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
//! * **Connecting:** [`SshExecutor::builder`] ([`SshExecutorBuilder`]) or
//!   [`SshExecutor::from_ssh_config`] ([`SshConfig`], `ProxyJump` through [`JumpHost`]s).
//!   [`build`](SshExecutorBuilder::build) connects once, so a wrong host key, refused
//!   credentials or an unreachable host fail there with a typed [`Error`].
//! * **Authentication and host keys:** key files, in-memory keys, OpenSSH certificates,
//!   ssh-agent and passwords ([`AuthMethod`]); host keys are verified against known_hosts by
//!   default ([`HostKeyPolicy`]); secrets never appear in `Debug` output or logs.
//! * **Commands:** through swiftide's `ToolExecutor` (`exec_cmd`, `exec_cmd_streaming`), or
//!   [`SshExecutor::run`] / [`SshExecutor::execute`] for the exit code, signal and duration
//!   ([`Execution`]). A command runs as LocalExecutor runs it (`sh -c`, or a `#!` script), in
//!   its own remote process group, which is killed on timeout, cancellation and disconnect.
//! * **Files:** `ReadFile`/`WriteFile` and a typed API ([`SshExecutor::read_file_bytes`],
//!   [`write_file_bytes`](SshExecutor::write_file_bytes), [`metadata`](SshExecutor::metadata),
//!   [`list_dir`](SshExecutor::list_dir), ...) over SFTP, writes atomic; `stream_files` with
//!   LocalExecutor's ignore rules.
//! * **Become:** [`Become`] escalates commands, files, `stream_files` and jobs with sudo,
//!   doas or su ([`SshExecutorBuilder::with_become`], [`SshExecutor::with_become`]): the
//!   password only on the channel at the tool's random prompt, kills that still take the
//!   whole group, atomic writes that keep owner and mode, typed
//!   [`Error::BecomeFailed`] results ([`BecomeFailure`]).
//! * **Stdin, terminals:** [`ExecOptions::stdin`], [`SshExecutor::spawn`] ([`Process`]: write
//!   stdin, read output as it arrives), [`ExecOptions::pty`] ([`Pty`]), and
//!   [`SshExecutor::open_terminal`]: a [`Terminal`] whose [`Screen`] an agent reads as text,
//!   driven with [`Key`]s, also as agent tools ([`TerminalTools`], and in the bamboo and MCP
//!   adapters); jobs with stdin ([`Job::write_stdin`]).
//! * **Forwards:** [`SshExecutor::forward_local`] (`ssh -L`),
//!   [`forward_dynamic`](SshExecutor::forward_dynamic) (`ssh -D`, SOCKS5) and
//!   [`forward_remote`](SshExecutor::forward_remote) (`ssh -R`): [`LocalForward`] and
//!   [`RemoteForward`] handles with [`ForwardStats`], refusals typed
//!   ([`Error::ForwardRefused`]), listeners that outlive a lost connection.
//! * **Pooling:** commands share connections through channels ([`PoolStats`]); a command is
//!   sent at most once. Each connection starts a resident runner (a Python 3 or Perl script
//!   sent on stdin, or this crate's `swiftide-ssh-runner` helper where the builder was given
//!   it) that runs its commands as requests on one channel, a spawn of `sh -c` each instead
//!   of a whole SSH session, with the same results and kills ([`Runner`]; one session per
//!   command where none can start). Jobs start through the Python runner's supervisor.
//! * **Fleets:** [`Fleet`] runs one command on many hosts: node sets, Ansible inventories,
//!   rolling batches with failure thresholds, retries of unreachable hosts, folded output,
//!   JSON records and an exit-code policy ([`fleet`]).
//! * **Jobs:** [`SshExecutor::spawn_job`] starts a command that outlives the call, the
//!   connection and the client ([`Job`]): reattach by id ([`SshExecutor::job`]), read its
//!   output by a client-owned cursor ([`Job::read`], [`Job::follow`]), its [`JobStatus`], a
//!   kill of the whole group that never signals a reused pid, a deadline kept on the host.
//!   [`JobTools`] gives a swiftide agent the same as tools (start, output since a cursor,
//!   status with a wait, kill, list); the bamboo and MCP adapters have them too.
//!
//! The [`guide`] explains each of these chapter by chapter, with examples; how one command
//! travels from `exec_cmd` to the remote process group and back, the kill path, the pool and
//! the file layer are in its [architecture](guide::architecture) chapter, every difference
//! from `LocalExecutor` in [commands](guide::commands#differences-from-localexecutor), and
//! the measured guarantees in [reliability](guide::reliability).
//!
//! # Cargo features
//!
//! All off by default; without them none of the adapters' dependencies are built.
//!
//! * **`agent-sdk`**: `adapters::agent_sdk`, an agent-sdk `Environment` over SSH.
//! * **`bamboo`**: `adapters::bamboo`, a bamboo `ToolExecutor` with bamboo's built-in file
//!   and shell tools over SSH.
//! * **`mcp`**: `adapters::mcp`, an MCP server exposing the executor's commands and files
//!   (for embedding; the `swiftide-ssh-mcp` crate is the ready-made binary).
//! * **`yaml`**: YAML Ansible inventories for fleets (INI needs no feature).
//! * **`flags`**: `flags`, the command-line flags (clap) the crate's binaries share: become
//!   and guards.
//!
//! # Stability
//!
//! The crate follows [Semantic Versioning](https://semver.org); before 1.0, a breaking change
//! bumps the minor version (0.1 → 0.2). Covered: every documented public item. Structs and
//! enums marked `#[non_exhaustive]` may gain fields and variants in a minor release (build
//! them with their constructors or builders, match them with a wildcard arm). Not covered:
//! items hidden from the documentation (`#[doc(hidden)]`, which exist for the crate's own
//! benchmarks), the exact text of the remote command lines the crate sends (wrappers,
//! bootstraps, markers), log messages and their fields, and the wording of error messages
//! (match on the [`Error`] variants and their fields instead). The minimum supported Rust
//! version (`rust-version`, currently 1.95) is the oldest toolchain CI tests; raising it is
//! a minor release, noted in the changelog.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, rust_2018_idioms, unreachable_pub)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// Each module imports only from the modules before it on this line (`.ci/check-layers.py`):
// Layers, bottom up: guide < error < audit < config < ssh < pool < command < executor < files < checkpoints < jobs < terminals < forwards < builder < fleet < tools < swiftide < adapters
pub mod adapters;
pub mod audit;
mod builder;
mod checkpoints;
mod command;
mod config;
mod error;
mod executor;
mod files;
pub mod fleet;
mod forwards;
pub mod guide;
mod jobs;
mod pool;
mod ssh;
mod swiftide;
mod terminals;
mod tools;

pub use builder::SshExecutorBuilder;
#[cfg(feature = "flags")]
pub use builder::flags;
pub use checkpoints::{Change, ChangeKind, Checkpoint};
pub use command::{Execution, ExitStatus, OutputChunk, OutputSink, Process, Pty};
pub use config::{
    AuthMethod, Become, Confinement, HostConfig, HostKeyPolicy, JumpHost, Limit, Limits, Network,
    PasswordProvider, PasswordRequest, Runner, Secret, SshConfig, StrictHostKeyChecking,
};
pub use error::{
    AccountKind, BecomeFailure, BecomeMethod, Error, ForwardRefusal, Phase, Result, SftpStatus,
};
pub use executor::{ExecOptions, SshExecutor};
pub use files::{DirEntry, FileMetadata, FileType};
pub use fleet::{
    FileChange, Fleet, FleetEvent, FleetJobStates, FleetJobs, FleetReport, FleetSummary,
    HostRecord, HostResult, HostStatus, Inventory, PushOptions, PushedFile, PushedFiles,
};
pub use forwards::{
    Forward, ForwardSpec, ForwardStats, ForwardTarget, ForwardedConnection, HostListener,
    LocalForward, RemoteForward,
};
pub use jobs::{
    DEFAULT_SPOOL_CAP, Job, JobCursor, JobDrop, JobDropReason, JobEndCause, JobInfo, JobOptions,
    JobOutput, JobStatus, JobStream,
};
pub use pool::PoolStats;
pub use swiftide::JobTools;
pub use swiftide::PortTools;
pub use swiftide::TerminalTools;
pub use terminals::{Key, KeyParseError, Screen, Terminal, TerminalOptions, Until, Waited};

// For the crate's own benchmarks (examples/bench); hidden, so not covered by semver (see
// "Stability" above).
#[doc(hidden)]
pub use command::exec_request_for_benchmarks;
