//! Files to and from every host, as pdcp/rpdcp, clush `--copy`/`--rcopy` and Fabric's
//! `Group.put`/`get` do: [`Fleet::push`] writes a local file or directory tree to every host,
//! [`Fleet::pull`] gathers one from every host into a local directory per host
//! (`<dest>/<host>/...`).
//!
//! Both go through the executor's SFTP file layer: each remote file is written atomically
//! (a temporary file renamed over the target, see
//! [`write_file_bytes`](crate::SshExecutor::write_file_bytes)) with the source's permission
//! bits, and every copied file's SHA-256 is checked after the copy. The results are a
//! [`FleetReport`] like a command's, so batches, thresholds, retries, records, folding and
//! the exit-code policy are the same.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use data_encoding::HEXLOWER;
use futures::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};

use super::{Fleet, FleetEvent, FleetReport, each::summary_execution};
use crate::{
    command::{Execution, ExitStatus},
    error::{Error, Result, SftpStatus},
    executor::SshExecutor,
    files::{ModeRule, quoted_path},
};

/// Files written or read at once on one host.
const FILES_IN_FLIGHT: usize = 8;

/// The exit code of the digest script on a host with neither `sha256sum` nor `shasum`.
const NO_DIGEST_TOOL: u32 = 127;

/// How a [`Fleet::push_with`] treats the files it writes.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PushOptions {
    /// Apply the local file's permission bits to files that exist on the host too (pdcp's
    /// and clush's `-p`, `swiftide-ssh push --preserve`). Defaults to false: an existing file
    /// keeps its bits, a new one gets the local file's.
    pub local_modes: bool,
}

impl PushOptions {
    /// See [`local_modes`](Self::local_modes). Defaults to false.
    pub fn local_modes(mut self, enabled: bool) -> Self {
        self.local_modes = enabled;
        self
    }

    /// The bits a pushed file whose local bits are `local` gets.
    fn mode_rule(&self, local: u32) -> ModeRule {
        if self.local_modes {
            ModeRule::Set(local)
        } else {
            ModeRule::KeepOrNew(local)
        }
    }
}

/// One file of a push, read once and shared by every host.
#[derive(Debug)]
struct SourceFile {
    /// Relative to the pushed root (empty for a single file).
    relative: PathBuf,
    content: Vec<u8>,
    mode: u32,
    sha256: String,
}

/// What a push sends: read from the local disk once, before any host starts.
#[derive(Debug)]
struct PushSource {
    /// The source's own name (`app` for `./app/`), used when the target is a directory.
    name: PathBuf,
    is_dir: bool,
    /// Directories relative to the root, parents before children.
    dirs: Vec<PathBuf>,
    files: Vec<SourceFile>,
    bytes: u64,
    /// Symlinks to directories, sockets and the like, not copied.
    skipped: usize,
}

fn sha256_hex(bytes: &[u8]) -> String {
    HEXLOWER.encode(&Sha256::digest(bytes))
}

fn local_error(operation: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_owned();
    move |source| Error::LocalFile {
        operation,
        path,
        source,
    }
}

#[cfg(unix)]
fn mode_of(metadata: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    metadata.permissions().mode() & 0o7777
}

#[cfg(not(unix))]
fn mode_of(metadata: &std::fs::Metadata) -> u32 {
    if metadata.permissions().readonly() {
        0o444
    } else {
        0o644
    }
}

impl PushSource {
    /// Reads `path` (a file, or a directory and everything under it). Symlinks to files are
    /// followed; symlinks to directories are not (no cycles) and are counted as skipped.
    fn read(path: &Path) -> Result<Self> {
        let metadata = std::fs::metadata(path).map_err(local_error("read", path))?;
        let name = path
            .file_name()
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("root"));
        let mut source = PushSource {
            name,
            is_dir: metadata.is_dir(),
            dirs: Vec::new(),
            files: Vec::new(),
            bytes: 0,
            skipped: 0,
        };
        if !metadata.is_dir() {
            source.add_file(path, PathBuf::new(), &metadata)?;
            return Ok(source);
        }
        let mut pending = vec![PathBuf::new()];
        while let Some(relative) = pending.pop() {
            let dir = path.join(&relative);
            let mut entries = std::fs::read_dir(&dir)
                .map_err(local_error("read directory", &dir))?
                .map(|entry| entry.map(|e| e.path()))
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(local_error("read directory", &dir))?;
            entries.sort();
            let mut subdirs = Vec::new();
            for entry in entries {
                let Some(file_name) = entry.file_name() else {
                    continue;
                };
                let child = relative.join(file_name);
                let own = std::fs::symlink_metadata(&entry).map_err(local_error("read", &entry))?;
                if own.is_dir() {
                    source.dirs.push(child.clone());
                    subdirs.push(child);
                    continue;
                }
                let followed = if own.file_type().is_symlink() {
                    match std::fs::metadata(&entry) {
                        Ok(followed) => followed,
                        // A dangling link: nothing to copy.
                        Err(_) => {
                            source.skipped += 1;
                            continue;
                        }
                    }
                } else {
                    own
                };
                if followed.is_file() {
                    source.add_file(&entry, child, &followed)?;
                } else {
                    source.skipped += 1;
                }
            }
            // Depth first in name order: parents are listed before their children.
            pending.extend(subdirs.into_iter().rev());
        }
        Ok(source)
    }

    fn add_file(
        &mut self,
        path: &Path,
        relative: PathBuf,
        metadata: &std::fs::Metadata,
    ) -> Result<()> {
        let content = std::fs::read(path).map_err(local_error("read", path))?;
        self.bytes += content.len() as u64;
        self.files.push(SourceFile {
            relative,
            sha256: sha256_hex(&content),
            mode: mode_of(metadata),
            content,
        });
        Ok(())
    }

    fn count(&self) -> String {
        let files = self.files.len();
        let mut text = format!(
            "{files} file{}, {} bytes",
            if files == 1 { "" } else { "s" },
            self.bytes
        );
        if self.skipped > 0 {
            text.push_str(&format!(
                " ({} symlinked director{} or special file{} not copied)",
                self.skipped,
                if self.skipped == 1 { "y" } else { "ies" },
                if self.skipped == 1 { "" } else { "s" },
            ));
        }
        text
    }
}

/// The SHA-256 of each remote file, computed on the host with `sha256sum` (or `shasum -a
/// 256`), or `None` when the host has neither or the script failed otherwise: the caller
/// then verifies another way and says so.
async fn remote_digests(executor: &SshExecutor, paths: &[PathBuf]) -> Result<Option<Vec<String>>> {
    if paths.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let mut script = format!(
        "if command -v sha256sum >/dev/null 2>&1; then d() {{ sha256sum; }}\n\
         elif command -v shasum >/dev/null 2>&1; then d() {{ shasum -a 256; }}\n\
         else exit {NO_DIGEST_TOOL}; fi\n\
         for f in"
    )
    .into_bytes();
    for path in paths {
        script.push(b' ');
        script.extend_from_slice(&quoted_path(path)?);
    }
    script
        .extend_from_slice(b"; do h=$(d < \"$f\") || exit 1; printf '%s\\n' \"${h%% *}\"; done\n");
    let (status, out) = crate::files::run_collect(executor, &script, Vec::new()).await?;
    if !status.success() {
        tracing::debug!(host = %executor.host(), ?status, "no remote sha256; verifying another way");
        return Ok(None);
    }
    let digests: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| line.trim().to_ascii_lowercase())
        .collect();
    Ok((digests.len() == paths.len()).then_some(digests))
}

fn mismatch(executor: &SshExecutor, path: &Path, expected: &str, actual: &str) -> Error {
    Error::ChecksumMismatch {
        host: executor.host().to_owned(),
        path: path.display().to_string(),
        expected: expected.to_owned(),
        actual: actual.to_owned(),
    }
}

/// Where a push lands on one host: into `dest` when it is an existing directory (or is
/// written with a trailing `/`), else at `dest` itself (cp and scp's rule).
async fn push_root(executor: &SshExecutor, source: &PushSource, dest: &Path) -> Result<PathBuf> {
    let resolved = executor.resolve_path(dest, None);
    if dest.as_os_str().as_encoded_bytes().ends_with(b"/") {
        return Ok(resolved.join(&source.name));
    }
    match executor.metadata(&resolved).await {
        Ok(metadata) if metadata.is_dir() => Ok(resolved.join(&source.name)),
        Ok(_) => Ok(resolved),
        Err(Error::Sftp {
            status: Some(SftpStatus::NoSuchFile),
            ..
        }) => Ok(resolved),
        Err(error) => Err(error),
    }
}

async fn push_one(
    executor: &SshExecutor,
    source: &PushSource,
    dest: &Path,
    options: &PushOptions,
) -> Result<Execution> {
    let root = push_root(executor, source, dest).await?;
    if source.is_dir {
        executor.create_dir_all(&root).await?;
        for dir in &source.dirs {
            executor.create_dir_all(&root.join(dir)).await?;
        }
    }
    let targets: Vec<PathBuf> = source
        .files
        .iter()
        .map(|file| {
            if file.relative.as_os_str().is_empty() {
                root.clone()
            } else {
                root.join(&file.relative)
            }
        })
        .collect();
    futures::stream::iter(source.files.iter().zip(&targets))
        .map(|(file, target)| {
            executor.write_resolved_mode(target, &file.content, options.mode_rule(file.mode))
        })
        .buffer_unordered(FILES_IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await?;
    let how = match remote_digests(executor, &targets).await? {
        Some(digests) => {
            for ((file, target), actual) in source.files.iter().zip(&targets).zip(&digests) {
                if &file.sha256 != actual {
                    return Err(mismatch(executor, target, &file.sha256, actual));
                }
            }
            "sha256 verified on the host"
        }
        None => {
            // No sha256sum or shasum (or no exec at all): read every file back over SFTP.
            let read_back = futures::stream::iter(targets.iter())
                .map(|target| executor.read_unaudited(target))
                .buffered(FILES_IN_FLIGHT)
                .try_collect::<Vec<Vec<u8>>>()
                .await?;
            for ((file, target), bytes) in source.files.iter().zip(&targets).zip(&read_back) {
                let actual = sha256_hex(bytes);
                if file.sha256 != actual {
                    return Err(mismatch(executor, target, &file.sha256, &actual));
                }
            }
            "sha256 verified by reading back (no sha256sum or shasum on the host)"
        }
    };
    Ok(summary_execution(
        executor.host(),
        ExitStatus::Code(0),
        format!("pushed {} to {}; {how}\n", source.count(), root.display()),
    ))
}

/// A host's name as one local directory name: `/` and NUL replaced, `.` and `..` and the
/// empty name escaped.
fn local_dir_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect();
    match cleaned.as_str() {
        "" | "." | ".." => format!("_{cleaned}"),
        _ => cleaned,
    }
}

/// One remote file of a pull.
struct PulledFile {
    remote: PathBuf,
    relative: PathBuf,
    mode: u32,
}

/// Lists what a pull of `source` copies: the file, or the tree under the directory
/// (symlinks to files followed, to directories not).
async fn pull_listing(
    executor: &SshExecutor,
    source: &Path,
) -> Result<(Vec<PathBuf>, Vec<PulledFile>, usize)> {
    let metadata = executor.metadata(source).await?;
    let name = source
        .file_name()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("root"));
    if metadata.is_file() {
        let file = PulledFile {
            remote: source.to_owned(),
            relative: name,
            mode: metadata.permissions,
        };
        return Ok((Vec::new(), vec![file], 0));
    }
    if !metadata.is_dir() {
        return Err(Error::Sftp {
            host: executor.host().to_owned(),
            operation: "pull",
            path: source.display().to_string(),
            reason: "not a regular file or directory".to_owned(),
            status: None,
        });
    }
    let (mut dirs, mut files, mut skipped) = (vec![name.clone()], Vec::new(), 0);
    let mut pending = vec![(source.to_owned(), name)];
    while let Some((remote, relative)) = pending.pop() {
        let mut subdirs = Vec::new();
        for entry in executor.list_dir(&remote).await? {
            let child = relative.join(&entry.name);
            let mut metadata = entry.metadata;
            if metadata.is_symlink() {
                match executor.metadata(&entry.path).await {
                    Ok(followed) if followed.is_file() => metadata = followed,
                    _ => {
                        skipped += 1;
                        continue;
                    }
                }
            }
            if metadata.is_dir() {
                dirs.push(child.clone());
                subdirs.push((entry.path, child));
            } else if metadata.is_file() {
                files.push(PulledFile {
                    remote: entry.path,
                    relative: child,
                    mode: metadata.permissions,
                });
            } else {
                skipped += 1;
            }
        }
        pending.extend(subdirs.into_iter().rev());
    }
    Ok((dirs, files, skipped))
}

/// Writes `content` to `path` atomically (a temporary file next to it, renamed over it)
/// with `mode`.
async fn write_local(path: &Path, content: &[u8], mode: u32) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = path.with_file_name(format!(
        ".{name}.swiftide-{:016x}.tmp",
        rand::random::<u64>()
    ));
    let written = async {
        tokio::fs::write(&temp, content)
            .await
            .map_err(local_error("write", &temp))?;
        set_local_mode(&temp, mode).await?;
        tokio::fs::rename(&temp, path)
            .await
            .map_err(local_error("rename", path))
    }
    .await;
    if written.is_err() {
        let _ = tokio::fs::remove_file(&temp).await;
    }
    written
}

#[cfg(unix)]
async fn set_local_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))
        .await
        .map_err(local_error("chmod", path))
}

#[cfg(not(unix))]
async fn set_local_mode(_path: &Path, _mode: u32) -> Result<()> {
    Ok(())
}

async fn pull_one(executor: &SshExecutor, source: &Path, local_root: &Path) -> Result<Execution> {
    let source = executor.resolve_path(source, None);
    let (dirs, files, skipped) = pull_listing(executor, &source).await?;
    let contents = futures::stream::iter(files.iter())
        .map(|file| executor.read_resolved(&file.remote))
        .buffered(FILES_IN_FLIGHT)
        .try_collect::<Vec<Vec<u8>>>()
        .await?;
    let local_digests: Vec<String> = contents.iter().map(|c| sha256_hex(c)).collect();
    let remote: Vec<PathBuf> = files.iter().map(|f| f.remote.clone()).collect();
    let verified = match remote_digests(executor, &remote).await? {
        Some(digests) => {
            for ((file, expected), actual) in files.iter().zip(&digests).zip(&local_digests) {
                if expected != actual {
                    return Err(mismatch(executor, &file.remote, expected, actual));
                }
            }
            "sha256 verified on the host"
        }
        None => "not verified on the host (no sha256sum or shasum)",
    };
    for dir in &dirs {
        let path = local_root.join(dir);
        tokio::fs::create_dir_all(&path)
            .await
            .map_err(local_error("create directory", &path))?;
    }
    if dirs.is_empty() {
        tokio::fs::create_dir_all(local_root)
            .await
            .map_err(local_error("create directory", local_root))?;
    }
    // The tree's digest (names, modes and contents): hosts whose copies are identical fold
    // together, a host that differs stands apart.
    let mut tree = BTreeMap::new();
    for ((file, content), digest) in files.iter().zip(&contents).zip(&local_digests) {
        write_local(&local_root.join(&file.relative), content, file.mode).await?;
        tree.insert(file.relative.clone(), (file.mode, digest.clone()));
    }
    let mut hasher = Sha256::new();
    for (relative, (mode, digest)) in &tree {
        hasher.update(relative.as_os_str().as_encoded_bytes());
        hasher.update(format!("\0{mode:o}\0{digest}\n").as_bytes());
    }
    let tree_digest = HEXLOWER.encode(&hasher.finalize());
    let bytes: usize = contents.iter().map(Vec::len).sum();
    let count = files.len();
    let mut summary = format!(
        "pulled {count} file{}, {bytes} bytes; content sha256 {}; {verified}",
        if count == 1 { "" } else { "s" },
        tree_digest.get(..16).unwrap_or_default()
    );
    if skipped > 0 {
        summary.push_str(&format!(
            "; {skipped} symlinked director{} or special file{} not copied",
            if skipped == 1 { "y" } else { "ies" },
            if skipped == 1 { "" } else { "s" }
        ));
    }
    summary.push('\n');
    Ok(summary_execution(
        executor.host(),
        ExitStatus::Code(0),
        summary,
    ))
}

impl Fleet {
    /// Copies a local file or directory tree to `dest` on every host, as pdcp, `clush
    /// --copy` and Fabric's `put` do.
    ///
    /// `source` is read once, before any host starts, and kept in memory for all hosts (a
    /// push is for configuration, scripts and binaries, not for data sets). On each host it
    /// lands in `dest` when `dest` is an existing directory or ends with `/`
    /// (`dest/<source's name>`), else at `dest` itself. Each file is written atomically (a
    /// temporary file next to it renamed over it: a reader sees the old content or the new,
    /// never a mix). A file that exists keeps its owner, group and permission bits, as
    /// `install`, scp and Ansible's copy keep them (a secret pushed over a `0640` file stays
    /// `0640`); a new file gets the local file's bits ([`PushOptions::local_modes`] applies
    /// them to existing files too). Missing directories are created
    /// (with the server's default mode), and afterwards every file's SHA-256 is computed on
    /// the host with `sha256sum` (or `shasum -a 256`) and compared with the source's. A host
    /// with neither tool has every file read back over SFTP and compared instead; the host's
    /// summary line says which check ran. Symlinks to files are followed; symlinked
    /// directories and special files are not copied (the summary counts them).
    ///
    /// Every host gets its own result: a host's failure does not stop the others, and
    /// batches, thresholds, fail-fast, retries of unreachable hosts and the per-host
    /// deadline apply as for [`run`](Self::run). A host's output is one summary line
    /// (`pushed 3 files, 1234 bytes to /etc/app; sha256 verified on the host`); a digest
    /// that differs fails the host with [`Error::ChecksumMismatch`].
    ///
    /// # Errors
    /// [`Error::LocalFile`] when `source` cannot be read (no host is started).
    ///
    /// # Cancel safety
    /// Dropping the future stops between files: every file is either its old content or the
    /// new one; temporary files are removed in the background.
    pub async fn push(
        &self,
        source: &Path,
        dest: &Path,
        on_event: impl FnMut(FleetEvent<'_>),
    ) -> Result<FleetReport> {
        self.push_with(source, dest, &PushOptions::default(), on_event)
            .await
    }

    /// [`push`](Self::push) with `options`.
    ///
    /// # Errors
    /// As [`push`](Self::push).
    ///
    /// # Cancel safety
    /// As [`push`](Self::push).
    pub async fn push_with(
        &self,
        source: &Path,
        dest: &Path,
        options: &PushOptions,
        on_event: impl FnMut(FleetEvent<'_>),
    ) -> Result<FleetReport> {
        let path = source.to_owned();
        let source = tokio::task::spawn_blocking(move || PushSource::read(&path))
            .await
            .map_err(|e| Error::InvalidInput {
                reason: format!("reading the push source failed: {e}"),
            })??;
        let source = Arc::new(source);
        let report = self
            .run_each(
                |_, executor| {
                    let source = source.clone();
                    async move { push_one(executor, &source, dest, options).await }
                },
                on_event,
            )
            .await;
        Ok(report)
    }

    /// Copies a remote file or directory tree from every host into `dest/<host>/`, as
    /// rpdcp, `clush --rcopy --dest` and Fabric's `get` do: `/etc/app` from `web01` lands in
    /// `dest/web01/app/...` (`<host>` is the member's [name](Self::names), with `/`
    /// replaced by `_`).
    ///
    /// Files are read over SFTP, checked against the SHA-256 computed on the host (with
    /// `sha256sum` or `shasum -a 256`; a host with neither is reported as not verified) and
    /// written locally atomically (a temporary file renamed over the target) with the
    /// remote permission bits. Symlinks to files are followed; symlinked directories and
    /// special files are not copied (counted in the summary). A host's summary line carries
    /// a digest of the whole copy (names, modes, contents), so hosts whose copies are
    /// identical fold together and a host whose file differs stands apart. Each host's
    /// files are held in memory until written.
    ///
    /// Batches, thresholds, fail-fast, retries and the per-host deadline apply as for
    /// [`run`](Self::run); a host's failure does not stop the others.
    pub async fn pull(
        &self,
        source: &Path,
        dest: &Path,
        on_event: impl FnMut(FleetEvent<'_>),
    ) -> FleetReport {
        self.run_each(
            |member, executor| {
                let local_root = dest.join(local_dir_name(self.name(member)));
                async move { pull_one(executor, source, &local_root).await }
            },
            on_event,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::local_dir_name;

    #[test]
    fn host_names_make_safe_directory_names() {
        assert_eq!(local_dir_name("web01"), "web01");
        assert_eq!(local_dir_name("ci@web-2:2222"), "ci@web-2:2222");
        assert_eq!(local_dir_name("a/b"), "a_b");
        assert_eq!(local_dir_name(".."), "_..");
        assert_eq!(local_dir_name(""), "_");
    }
}
