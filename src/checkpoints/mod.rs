//! Checkpoints an agent can roll back: [`SshExecutor::checkpoint`] records a working tree on
//! the host, [`SshExecutor::changes_since`] lists what changed, [`SshExecutor::rollback`] puts
//! it back exactly (content, file types, permission bits, symlinks, removed and added
//! files, empty directories).
//!
//! Stored on the host, in a private directory of the account
//! (`$XDG_STATE_HOME/swiftide-ssh/checkpoints/`, by default under `~/.local/state`, mode
//! 0700): a git object store per tree, reached with `GIT_DIR`/`GIT_WORK_TREE` so that the
//! tree's own `.git`, hooks, ignore rules and the user's git configuration play no part, and
//! unchanged files cost nothing in the next checkpoint. What git does not keep (modes other
//! than the executable bit, empty directories) is a manifest walked over SFTP and stored
//! beside each commit. Needs `git` on the host (as the account the handle becomes).

mod manifest;
mod script;

use std::{collections::HashSet, path::PathBuf};

use crate::{
    command::ExitStatus,
    error::{Error, Result},
    executor::SshExecutor,
    files::run_collect,
};

/// A recorded state of a tree on a host ([`SshExecutor::checkpoint`]). Its fields are all
/// that is needed to use it again, from another executor or process too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The tree, as resolved against the executor's workdir.
    pub dir: PathBuf,
    /// The checkpoint's id (its commit in the tree's private store).
    pub id: String,
}

/// One difference between a tree and a checkpoint of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Relative to the tree.
    pub path: PathBuf,
    /// What changed.
    pub kind: ChangeKind,
}

/// How a path differs from its checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChangeKind {
    /// Not in the checkpoint (a file, symlink or directory).
    Added,
    /// Its content or its executable bit changed (a symlink: its target).
    Modified,
    /// In the checkpoint, gone now.
    Removed,
    /// A file, symlink or directory became another of these.
    TypeChanged,
    /// Only its permission bits changed.
    ModeChanged,
}

impl SshExecutor {
    /// Records the tree at `dir` (relative to the workdir) as it is now: every file, ignored
    /// ones too, symlinks as symlinks (never followed), permission bits, empty directories;
    /// `.git` directories are left out. A checkpoint of a tree that did not change since
    /// the last one costs one walk and one commit, no copies.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] when the host has no `git`, `dir` is not a directory or holds
    /// the account's checkpoint store (a home directory, `/`); connection errors.
    pub async fn checkpoint(&self, dir: impl AsRef<std::path::Path>) -> Result<Checkpoint> {
        let dir = self.resolve_path(dir.as_ref(), None);
        let mut audit = self.audit_path("checkpoint", &dir, None)?;
        let result = self.checkpoint_unaudited(dir).await;
        if let Ok(checkpoint) = &result {
            audit.note(|record| record.checkpoint = Some(checkpoint.id.clone()));
        }
        audit.end_with(&result);
        result
    }

    /// The commit first (it refuses what cannot be checkpointed before any walk), then the
    /// manifest beside it.
    async fn checkpoint_unaudited(&self, dir: PathBuf) -> Result<Checkpoint> {
        let key = store_key(&dir);
        let out = self
            .checkpoint_script(&dir, script::checkpoint(&dir, &key), Vec::new())
            .await?;
        let id = String::from_utf8_lossy(&out).trim().to_owned();
        if id.len() != 40 && id.len() != 64 {
            return Err(self.checkpoint_error(&dir, format!("git answered {id:?}")));
        }
        let recorded = manifest::walk(self, &dir).await?;
        let manifest = serde_json::to_vec(&recorded)
            .map_err(|error| self.checkpoint_error(&dir, error.to_string()))?;
        self.checkpoint_script(&dir, script::keep_manifest(&dir, &key, &id), manifest)
            .await?;
        Ok(Checkpoint { dir, id })
    }

    /// What differs in the tree from `checkpoint`: added, modified and removed files and
    /// symlinks, type changes, mode changes, directories that came or went; sorted by path.
    ///
    /// # Errors
    /// As [`checkpoint`](Self::checkpoint); [`Error::Checkpoint`] for a checkpoint the store
    /// does not hold.
    pub async fn changes_since(&self, checkpoint: &Checkpoint) -> Result<Vec<Change>> {
        let out = self
            .checkpoint_script(
                &checkpoint.dir,
                script::changes(&checkpoint.dir, &store_key(&checkpoint.dir), &checkpoint.id),
                Vec::new(),
            )
            .await?;
        let (mut changes, recorded) = self.parse_changes(checkpoint, &out)?;
        let now = manifest::walk(self, &checkpoint.dir).await?;
        let reported: HashSet<String> = changes
            .iter()
            .map(|change| change.path.to_string_lossy().into_owned())
            .collect();
        changes.extend(manifest::differences(&recorded, &now, &reported));
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(changes)
    }

    /// Puts the tree back exactly as `checkpoint` recorded it (content, types, permission
    /// bits, symlinks, removed and added files, empty directories), and returns what it
    /// undid: the [`changes_since`](Self::changes_since) the checkpoint, whoever made them.
    /// Files added since are removed, ignored ones included; `.git` directories and nested
    /// repositories are left alone. Never writes through a symlink.
    ///
    /// # Errors
    /// As [`changes_since`](Self::changes_since).
    pub async fn rollback(&self, checkpoint: &Checkpoint) -> Result<Vec<Change>> {
        let mut audit = self.audit_path("rollback", &checkpoint.dir, None)?;
        audit.note(|record| record.checkpoint = Some(checkpoint.id.clone()));
        let result = self.rollback_unaudited(checkpoint).await;
        audit.end_with(&result);
        result
    }

    async fn rollback_unaudited(&self, checkpoint: &Checkpoint) -> Result<Vec<Change>> {
        let undone = self.changes_since(checkpoint).await?;
        let dir = &checkpoint.dir;
        let out = self
            .checkpoint_script(
                dir,
                script::rollback(dir, &store_key(dir), &checkpoint.id),
                Vec::new(),
            )
            .await?;
        let recorded = parse_manifest(self, checkpoint, after_end_token(&out))?;
        let now = manifest::walk(self, dir).await?;
        let added: Vec<u8> = manifest::added_dirs(&recorded, &now)
            .iter()
            .flat_map(|path| format!("./{path}\0").into_bytes())
            .collect();
        if !added.is_empty() {
            self.checkpoint_script(dir, script::remove_empty_dirs(dir), added)
                .await?;
        }
        let fixes = manifest::fixes(&recorded, &now);
        let mut dirs = Vec::new();
        let mut modes = Vec::new();
        for (_, path, make) in &fixes {
            if *make {
                dirs.extend_from_slice(format!("./{path}\0").as_bytes());
            }
        }
        for (mode, path, _) in fixes.iter().rev() {
            modes.extend_from_slice(format!("{mode:o}\0./{path}\0").as_bytes());
        }
        if !dirs.is_empty() {
            self.checkpoint_script(dir, script::make_dirs(dir), dirs)
                .await?;
        }
        if !modes.is_empty() {
            self.checkpoint_script(dir, script::set_modes(dir), modes)
                .await?;
        }
        Ok(undone)
    }

    /// Runs one of the checkpoint scripts for the tree `dir`, its stdout when it succeeds.
    async fn checkpoint_script(
        &self,
        dir: &std::path::Path,
        script: Vec<u8>,
        stdin: Vec<u8>,
    ) -> Result<Vec<u8>> {
        let (status, out) = run_collect(self, &script, stdin).await?;
        if status.success() {
            return Ok(out.stdout);
        }
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said.trim().lines().last().unwrap_or_default().to_owned();
        Err(self.checkpoint_error(
            dir,
            match status {
                ExitStatus::Code(script::NO_GIT) => {
                    "git is not installed on the host (checkpoints need it)".to_owned()
                }
                ExitStatus::Code(
                    script::NO_TREE | script::NO_CHECKPOINT | script::HOLDS_STORE | script::BUSY,
                ) => said,
                other => format!("{other:?}: {said}"),
            },
        ))
    }

    /// Git's changes (`STATUS\0PATH\0`...) and, after the empty token, the manifest.
    fn parse_changes(
        &self,
        checkpoint: &Checkpoint,
        out: &[u8],
    ) -> Result<(Vec<Change>, manifest::Manifest)> {
        let mut changes = Vec::new();
        let mut tokens = out.split(|byte| *byte == 0);
        loop {
            let Some(status) = tokens.next() else {
                return Err(
                    self.checkpoint_error(&checkpoint.dir, "git's changes ended early".into())
                );
            };
            if status.is_empty() {
                break;
            }
            let Some(path) = tokens.next() else {
                return Err(
                    self.checkpoint_error(&checkpoint.dir, "git's changes ended early".into())
                );
            };
            let kind = match status.first() {
                Some(b'A') => ChangeKind::Added,
                Some(b'D') => ChangeKind::Removed,
                Some(b'T') => ChangeKind::TypeChanged,
                _ => ChangeKind::Modified,
            };
            use std::os::unix::ffi::OsStrExt;
            changes.push(Change {
                path: std::ffi::OsStr::from_bytes(path).into(),
                kind,
            });
        }
        let recorded = parse_manifest(self, checkpoint, after_end_token(out))?;
        Ok((changes, recorded))
    }

    fn checkpoint_error(&self, dir: &std::path::Path, reason: String) -> Error {
        Error::Checkpoint {
            host: self.host().to_owned(),
            dir: dir.to_path_buf(),
            reason,
        }
    }
}

/// What follows the first empty NUL-terminated token (git's changes end there; the
/// rollback script prints the token alone).
fn after_end_token(out: &[u8]) -> &[u8] {
    let mut start = 0;
    while let Some(end) = out[start..].iter().position(|byte| *byte == 0) {
        if end == 0 {
            return &out[start + 1..];
        }
        start += end + 1;
    }
    &[]
}

fn parse_manifest(
    executor: &SshExecutor,
    checkpoint: &Checkpoint,
    bytes: &[u8],
) -> Result<manifest::Manifest> {
    serde_json::from_slice(bytes).map_err(|error| {
        executor.checkpoint_error(
            &checkpoint.dir,
            format!("the checkpoint's manifest is unreadable: {error}"),
        )
    })
}

/// The store of the tree at `dir`: one per tree and account.
fn store_key(dir: &std::path::Path) -> String {
    use sha2::Digest;
    use std::os::unix::ffi::OsStrExt;
    let digest = sha2::Sha256::digest(dir.as_os_str().as_bytes());
    data_encoding::HEXLOWER.encode(&digest[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_follows_the_first_empty_token() {
        assert_eq!(after_end_token(b"M\0a\0A\0b c\0\0{\"x\":1}"), b"{\"x\":1}");
        assert_eq!(after_end_token(b"\0{}"), b"{}");
        assert_eq!(after_end_token(b"M\0a\0"), b"");
    }
}
