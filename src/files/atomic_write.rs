//! The atomic write over SFTP behind [`SshExecutor::write_file_bytes`]: follow symlinks to
//! the real target, write a private temporary file next to it (content, then mode and owner),
//! and `posix-rename` it over the target. A directory that refuses the temporary file falls
//! back to LocalExecutor's in-place write.

use std::{path::Path, sync::Arc};

use russh_sftp::{
    client::error::Error as SftpError,
    protocol::{FileAttributes, OpenFlags, StatusCode},
};

use crate::{
    error::Result,
    executor::SshExecutor,
    files::{
        error::{EISDIR, ELOOP},
        exec_fallback,
        remote_fs::{FileMetadata, sftp_path},
        sftp::{OpenHandle, SftpChannel, has_status},
    },
};

/// Symlinks followed before a write gives up, as Linux's `ELOOP` limit.
const MAX_SYMLINKS: usize = 40;

/// Where a write really goes after following symlinks.
struct WriteTarget {
    path: String,
    /// The existing file's attributes, `None` for a new file.
    existing: Option<FileAttributes>,
}

/// The temporary file of an atomic write. Removed in the background when dropped armed
/// (a failure or a cancelled future).
struct TempFile {
    channel: Arc<SftpChannel>,
    path: String,
    armed: bool,
}

impl TempFile {
    /// A new temporary name next to `target`, armed: removed when dropped unless disarmed.
    fn next_to(channel: &Arc<SftpChannel>, target: &str) -> Self {
        TempFile {
            channel: channel.clone(),
            path: temp_name(target, rand::random()),
            armed: true,
        }
    }

    /// Creates the file: new, and private (0600) while the content is incomplete; the final
    /// mode is set before the rename.
    async fn open(&self) -> std::result::Result<OpenHandle, SftpError> {
        let flags = OpenFlags::WRITE | OpenFlags::CREATE | OpenFlags::EXCLUDE;
        let private = FileAttributes {
            permissions: Some(0o600),
            ..FileAttributes::empty()
        };
        self.channel.open_handle(&self.path, flags, private).await
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let channel = self.channel.clone();
        let path = std::mem::take(&mut self.path);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = channel.remove(&path).await;
            });
        }
    }
}

/// `.<name>.swiftide-<16 hex digits>.tmp` in the target's directory. Long names are cut so
/// the result stays within the usual 255-byte limit for one name.
fn temp_name(target: &str, nonce: u64) -> String {
    let (dir, name) = match target.rfind('/') {
        Some(at) => target.split_at(at + 1),
        None => ("", target),
    };
    let mut end = name.len().min(200);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let short = name.get(..end).unwrap_or_default();
    format!("{dir}.{short}.swiftide-{nonce:016x}.tmp")
}

/// Everything up to the last `/` (empty for a bare name).
fn directory_of(path: &str) -> &str {
    path.rfind('/').and_then(|at| path.get(..at)).unwrap_or("")
}

/// Resolves a symlink's target: absolute as is, relative against the link's directory.
fn link_target(link: &str, target: &str) -> String {
    if target.starts_with('/') {
        return target.to_owned();
    }
    match link.rfind('/') {
        Some(at) => format!("{}{target}", link.get(..=at).unwrap_or_default()),
        None => target.to_owned(),
    }
}

/// The permission bits a write gives a file: one rule for the library's writes, fleet
/// pushes and every door that writes files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModeRule {
    /// An existing file's bits; a new file gets 0644 (`write_file`, as LocalExecutor's
    /// writes over an existing file keep it).
    Keep,
    /// An existing file's bits; a new file gets these (a push: the local file's mode for a
    /// new file, as `install`, scp and Ansible's copy keep an existing file's).
    KeepOrNew(u32),
    /// These bits, whatever was there (a push asked to apply the local mode: `--preserve`).
    Set(u32),
}

impl ModeRule {
    /// The bits for a file whose existing bits are `existing` (`None`: a new file, or one
    /// whose bits the server did not report).
    pub(crate) fn bits(self, existing: Option<u32>) -> u32 {
        match (self, existing) {
            (ModeRule::Set(bits), _) => bits,
            (ModeRule::Keep | ModeRule::KeepOrNew(_), Some(old)) => old,
            (ModeRule::KeepOrNew(bits), None) => bits,
            (ModeRule::Keep, None) => 0o644,
        }
    }
}

/// Everything a write decides about a file besides its content: the permission bits, and
/// an owner and group to give it. Without an owner or group the existing file's are kept
/// where the server allows (best effort: a login that is not root cannot give a file away);
/// one that is given must be applied, or the write fails and the old file stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileRule {
    pub(crate) mode: ModeRule,
    /// The owner's user id to set.
    pub(crate) uid: Option<u32>,
    /// The group id to set.
    pub(crate) gid: Option<u32>,
}

impl From<ModeRule> for FileRule {
    fn from(mode: ModeRule) -> Self {
        FileRule {
            mode,
            uid: None,
            gid: None,
        }
    }
}

impl FileRule {
    /// The ids a `chown` that must succeed gives the file, `u32::MAX` (chown's `-1`) for the
    /// one left as it is; `None` when neither is asked for.
    pub(crate) fn required_owner(self) -> Option<(u32, u32)> {
        (self.uid.is_some() || self.gid.is_some())
            .then(|| (self.uid.unwrap_or(u32::MAX), self.gid.unwrap_or(u32::MAX)))
    }
}

impl SshExecutor {
    /// The write of [`SshExecutor::write_file_bytes`] on `channel`, for a resolved `path`,
    /// its permission bits, owner and group as `rule` says.
    pub(crate) async fn write_atomic(
        &self,
        channel: &Arc<SftpChannel>,
        path: &Path,
        content: &[u8],
        rule: FileRule,
    ) -> Result<()> {
        let text = sftp_path(path)?;
        // The first lstat of the target and the open of a temporary file next to it go out
        // together, which saves a round trip whenever the target is a regular file or a new
        // name (3 round trips in all for a small file). The guard is armed before the open is
        // sent: if this future is dropped while the open is on its way, the removal is
        // queued behind it.
        let mut temp = TempFile::next_to(channel, text);
        let (first_lstat, mut opened) = tokio::join!(channel.lstat(text), temp.open());
        if opened.is_err() {
            temp.armed = false;
        }
        let target = match self.write_target(channel, text, first_lstat).await? {
            Some(target) => target,
            // A link pointing to a name SFTP cannot carry: let the shell follow it.
            None => return exec_fallback::write_via_exec(self, path, content, rule).await,
        };
        if target
            .existing
            .as_ref()
            .is_some_and(|a| FileMetadata::from_attrs(a).is_dir())
        {
            return Err(self.file_error("write", path, EISDIR));
        }
        if directory_of(&target.path) != directory_of(text) {
            // A symlink into another directory: the temporary file must live next to the
            // real target for the rename to be atomic. The speculative one is removed.
            drop(opened);
            drop(temp);
            temp = TempFile::next_to(channel, &target.path);
            opened = temp.open().await;
        }
        let file = match opened {
            Ok(file) => file,
            Err(e) if has_status(&e, StatusCode::NoSuchFile) && target.existing.is_none() => {
                // LocalExecutor creates missing parents and ignores errors doing so; the
                // second open reports the real one.
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    let _ = self.mkdir_all(channel, parent).await;
                }
                temp.armed = true;
                match temp.open().await {
                    Ok(file) => file,
                    Err(error) => {
                        temp.armed = false;
                        return Err(self.sftp_error("write", &target.path, error));
                    }
                }
            }
            // In place, an owner or group asked for could not be set before the content is
            // visible: the refusal stands.
            Err(e)
                if has_status(&e, StatusCode::PermissionDenied)
                    && target.existing.is_some()
                    && rule.required_owner().is_none() =>
            {
                temp.armed = false;
                return self.write_in_place(channel, &target.path, content).await;
            }
            Err(error) => {
                temp.armed = false;
                return Err(self.sftp_error("write", &target.path, error));
            }
        };
        let existing = target.existing.as_ref();
        let mode = rule.mode.bits(existing.and_then(|a| a.permissions));
        let mut kept = existing.and_then(|a| a.uid.zip(a.gid));
        if let Some((uid, gid)) = rule.required_owner() {
            // The old owner first (best effort), so that the id not asked for is the old
            // file's; then the one asked for, which must succeed: on a refusal the temporary
            // file is removed and the old file stays.
            if let Some((old_uid, old_gid)) = kept.take() {
                channel.set_owner(&file.handle, old_uid, old_gid).await;
            }
            if let Err(error) = channel.chown(&file.handle, uid, gid).await {
                // Removed before the error is returned, not in the background: a program
                // that exits on the error (the command line) leaves nothing behind.
                drop(file);
                let _ = channel.remove(&temp.path).await;
                temp.armed = false;
                return Err(self.sftp_error("chown", &target.path, error));
            }
        }
        channel
            .fill_and_close(file, content, mode, kept)
            .await
            .map_err(|e| self.sftp_error("write", &target.path, e))?;
        channel
            .rename(&temp.path, &target.path)
            .await
            .map_err(|e| self.sftp_error("write", &target.path, e))?;
        temp.armed = false;
        Ok(())
    }

    /// LocalExecutor's non-atomic write: truncate and write the existing file in place.
    async fn write_in_place(
        &self,
        channel: &Arc<SftpChannel>,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let fail = |e| self.sftp_error("write", path, e);
        let flags = OpenFlags::WRITE | OpenFlags::TRUNCATE;
        let file = channel
            .open_handle(path, flags, FileAttributes::empty())
            .await
            .map_err(fail)?;
        channel
            .write_all(file.handle.as_str(), content)
            .await
            .map_err(fail)?;
        file.close().await.map_err(fail)
    }

    /// Follows symlinks from `path` (whose lstat is `first_lstat`) to the file a write
    /// replaces. `None` when a link target came back lossily decoded (not valid UTF-8).
    async fn write_target(
        &self,
        channel: &Arc<SftpChannel>,
        path: &str,
        first_lstat: std::result::Result<FileAttributes, SftpError>,
    ) -> Result<Option<WriteTarget>> {
        let mut current = path.to_owned();
        let mut first_lstat = Some(first_lstat);
        for _ in 0..MAX_SYMLINKS {
            let lstat = match first_lstat.take() {
                Some(result) => result,
                None => channel.lstat(&current).await,
            };
            let attrs = match lstat {
                Ok(attrs) => attrs,
                Err(e) if has_status(&e, StatusCode::NoSuchFile) => {
                    return Ok(Some(WriteTarget {
                        path: current,
                        existing: None,
                    }));
                }
                Err(error) => return Err(self.sftp_error("write", path, error)),
            };
            if !FileMetadata::from_attrs(&attrs).is_symlink() {
                return Ok(Some(WriteTarget {
                    path: current,
                    existing: Some(attrs),
                }));
            }
            let target = channel
                .read_link(&current)
                .await
                .map_err(|e| self.sftp_error("write", path, e))?;
            if target.contains(char::REPLACEMENT_CHARACTER) {
                return Ok(None);
            }
            current = link_target(&current, &target);
        }
        Err(self.file_error("write", Path::new(path), ELOOP))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_stay_in_the_target_directory_and_short() {
        assert_eq!(
            temp_name("/a/b/file.txt", 0xab),
            "/a/b/.file.txt.swiftide-00000000000000ab.tmp"
        );
        assert_eq!(temp_name("file", 1), ".file.swiftide-0000000000000001.tmp");
        let long = format!("/d/{}", "é".repeat(200));
        let temp = temp_name(&long, 2);
        let name = temp.rsplit('/').next().unwrap_or_default();
        assert!(name.len() <= 255, "{}", name.len());
        assert!(temp.starts_with("/d/.é"));
    }

    #[test]
    fn relative_link_targets_resolve_against_the_link_directory() {
        assert_eq!(link_target("/a/b/link", "c/file"), "/a/b/c/file");
        assert_eq!(link_target("/a/b/link", "/abs"), "/abs");
        assert_eq!(link_target("link", "other"), "other");
        assert_eq!(link_target("/link", "../x"), "/../x");
    }
}
