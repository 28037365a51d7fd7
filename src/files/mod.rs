//! Files on the remote host: the SFTP channel each connection keeps ([`sftp`]), the typed
//! file API on [`SshExecutor`](crate::SshExecutor) ([`remote_fs`]), atomic writes
//! ([`atomic_write`]), the shell fallback for paths SFTP cannot carry ([`exec_fallback`]),
//! LocalExecutor-worded file errors ([`error`]), and `stream_files` with its ignore rules
//! ([`stream_files`], [`ignore_rules`]). The crate's own scripts (the fallback, the remote
//! `find`) run through [`own_script`].

mod atomic_write;
mod error;
mod exec_fallback;
mod ignore_rules;
mod own_script;
mod remote_fs;
mod sftp;
mod stream_files;

pub(crate) use atomic_write::{FileRule, ModeRule};
/// For jobs, fleet copies (the remote checksums) and the tools' remote search.
pub(crate) use own_script::{Collected, quoted_path, run_collect};
/// For the tools' remote search.
#[cfg(any(feature = "agent-sdk", feature = "bamboo", feature = "mcp"))]
pub(crate) use own_script::{option_safe, run_script};
pub use remote_fs::{DirEntry, FileMetadata, FileType};
/// For jobs' polls, which keep handles open on the connection's SFTP channel.
pub(crate) use remote_fs::{Retry, sftp_path};
pub(crate) use sftp::{SftpChannel, has_status};
pub(crate) use stream_files::{LoadedFile, walk_files};
