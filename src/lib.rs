//! A swiftide [`ToolExecutor`](swiftide_core::ToolExecutor) that runs commands and file
//! operations on a remote host over pooled SSH connections (russh), with the exact semantics
//! of swiftide's `LocalExecutor`.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod auth;
mod builder;
mod error;
mod exec;
mod executor;
mod host_key;
mod known_hosts;
mod output;
mod pool;
mod session;
mod sftp;
mod shell;
mod swiftide;

pub use auth::{AuthMethod, Secret};
pub use builder::SshExecutorBuilder;
pub use error::{Error, Phase, Result, SftpStatus};
pub use executor::{ExecOptions, SshExecutor};
pub use host_key::HostKeyPolicy;
pub use output::{Execution, ExitStatus, OutputChunk, OutputSink};
pub use pool::PoolStats;
