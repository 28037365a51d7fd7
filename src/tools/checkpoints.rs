//! The checkpoint tools (`checkpoint`, `changes_since`, `rollback`): their descriptions,
//! arguments and result text, defined once for every door (see [`crate::Checkpoint`]).

use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::{Change, ChangeKind, Checkpoint, error::Result, executor::SshExecutor};

pub(crate) const CHECKPOINT_ABOUT: &str = "Record the exact state of a directory tree on the \
remote host (every file, ignored ones too; symlinks; permission bits; empty directories) \
before changing it. Returns a checkpoint id for `changes_since` and `rollback`. Cheap to repeat: \
only what changed since the last checkpoint is stored.";

pub(crate) const CHANGES_SINCE_ABOUT: &str = "List what changed in a directory tree on the \
remote host since a checkpoint: one line per path, `added`, `modified`, `removed`, \
`type changed` or `mode changed`.";

pub(crate) const ROLLBACK_ABOUT: &str = "Put a directory tree on the remote host back exactly \
as a checkpoint recorded it: removes what was added, restores what was changed or removed \
(content, symlinks, permission bits, empty directories). Lists what it undid.";

/// Arguments of `checkpoint`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub(crate) struct CheckpointArgs {
    /// The directory tree: absolute, or relative to the working directory.
    pub(crate) path: String,
}

/// Arguments of `changes_since` and `rollback`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub(crate) struct CheckpointIdArgs {
    /// The directory tree the checkpoint was taken of.
    pub(crate) path: String,
    /// The id `checkpoint` returned.
    pub(crate) id: String,
}

/// `checkpoint` of the resolved tree `dir`.
pub(crate) async fn checkpoint(executor: &SshExecutor, dir: &Path) -> Result<String> {
    let checkpoint = executor.checkpoint(dir).await?;
    Ok(format!(
        "checkpoint {} of {}",
        checkpoint.id,
        checkpoint.dir.display()
    ))
}

/// `changes_since` on the resolved tree `dir`.
pub(crate) async fn changes_since(executor: &SshExecutor, dir: &Path, id: &str) -> Result<String> {
    let changes = executor.changes_since(&named(dir, id)).await?;
    Ok(listing(&changes, "no changes since the checkpoint"))
}

/// `rollback` of the resolved tree `dir`.
pub(crate) async fn rollback(executor: &SshExecutor, dir: &Path, id: &str) -> Result<String> {
    let checkpoint = named(dir, id);
    let undone = executor.rollback(&checkpoint).await?;
    Ok(format!(
        "rolled back {} to checkpoint {}\n{}",
        dir.display(),
        checkpoint.id,
        listing(&undone, "nothing had changed")
    ))
}

/// The checkpoint a tool call names: its tree and the id `checkpoint` gave.
fn named(dir: &Path, id: &str) -> Checkpoint {
    Checkpoint {
        dir: dir.to_path_buf(),
        id: id.trim().to_owned(),
    }
}

/// One line per change, or `none` when there are none.
fn listing(changes: &[Change], none: &str) -> String {
    if changes.is_empty() {
        return none.to_owned();
    }
    changes
        .iter()
        .map(|change| {
            let kind = match change.kind {
                ChangeKind::Added => "added",
                ChangeKind::Modified => "modified",
                ChangeKind::Removed => "removed",
                ChangeKind::TypeChanged => "type changed",
                ChangeKind::ModeChanged => "mode changed",
            };
            format!("{kind} {}", change.path.display())
        })
        .collect::<Vec<_>>()
        .join("\n")
}
