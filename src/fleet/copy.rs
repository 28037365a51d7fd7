//! Files to and from every host, as pdcp/rpdcp, clush `--copy`/`--rcopy` and Fabric's
//! `Group.put`/`get` do: [`Fleet::push`] writes a local file or directory tree to every host,
//! [`Fleet::pull`] gathers one from every host into a local directory per host
//! (`<dest>/<host>/...`).
//!
//! Both go through the executor's SFTP file layer: each remote file is written atomically
//! (a temporary file renamed over the target, see
//! [`write_file_bytes`](crate::SshExecutor::write_file_bytes)) with the permission bits,
//! owner and group [`PushOptions`] say, and every copied file's SHA-256 is checked after
//! the copy. A file that already has the content and attributes a push would give it is
//! not written at all ([`FileChange::Unchanged`]). The results are a [`FleetReport`] like a
//! command's, so batches, thresholds, retries, records, folding and the exit-code policy
//! are the same.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use data_encoding::HEXLOWER;
use futures::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};

use super::{
    Fleet, FleetEvent, FleetReport,
    each::{Attempted, summary_execution},
};
use crate::{
    command::{Execution, ExitStatus, quote},
    error::{AccountKind, Error, Result, SftpStatus},
    executor::SshExecutor,
    files::{FileMetadata, FileRule, ModeRule, quoted_path},
};

/// Files written or read at once on one host.
const FILES_IN_FLIGHT: usize = 8;

/// Stats sent at once on one host before a push (small requests: the SFTP channel carries
/// many without waiting for each answer).
const STATS_IN_FLIGHT: usize = 64;

/// The exit code of the digest script on a host with neither `sha256sum` nor `shasum`.
const NO_DIGEST_TOOL: u32 = 127;

/// How a [`Fleet::push_with`] treats the files it writes: their permission bits, owner and
/// group (Ansible copy's `mode`, `owner` and `group`). A file that already has the content
/// and the attributes the push would give it is left alone and reported
/// [`FileChange::Unchanged`].
///
/// They apply to the files only: a directory the push creates gets the server's default
/// mode and belongs to the account the push runs as (the login user, or the become user of
/// an escalated fleet); an existing directory is left as it is.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PushOptions {
    /// Apply the local file's permission bits to files that exist on the host too (pdcp's
    /// and clush's `-p`, `swiftide-ssh push --preserve`). Defaults to false: an existing file
    /// keeps its bits, a new one gets the local file's.
    pub local_modes: bool,
    /// The permission bits of every pushed file, new or existing (`swiftide-ssh push --mode
    /// 0640`); over [`local_modes`](Self::local_modes). Defaults to `None`: as
    /// `local_modes` says.
    pub mode: Option<u32>,
    /// The owner of every pushed file: a user name, looked up on each host (names differ
    /// between hosts), or a numeric user id. Defaults to `None`: an existing file keeps its
    /// owner (where the server allows), a new one belongs to the account the push runs as.
    pub owner: Option<String>,
    /// The group of every pushed file: a group name, looked up on each host, or a numeric
    /// group id. Defaults to `None`: an existing file keeps its group (where the server
    /// allows), a new one gets the server's default.
    pub group: Option<String>,
}

impl PushOptions {
    /// See [`local_modes`](Self::local_modes). Defaults to false.
    pub fn local_modes(mut self, enabled: bool) -> Self {
        self.local_modes = enabled;
        self
    }

    /// Gives every pushed file the permission bits `mode` (`0o640`; at most `0o7777`), over
    /// [`local_modes`](Self::local_modes). Defaults to `None`: an existing file keeps its
    /// bits, a new one gets the local file's.
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Gives every pushed file the owner `owner`: a user name, resolved on each host with
    /// `id -u` before anything is written there, or a numeric uid. Setting an owner needs
    /// the right to (root, usually through [`Become`](crate::Become): the change is made by
    /// the account the push runs as). A host without the user fails with
    /// [`Error::UnknownAccount`]; one that refuses the change fails with [`Error::Sftp`];
    /// either way the file there keeps its old content. Defaults to `None`: an existing file
    /// keeps its owner, a new one belongs to the account the push runs as.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Gives every pushed file the group `group`: a group name, resolved on each host with
    /// `getent group` (or `/etc/group` without getent) before anything is written there, or
    /// a numeric gid. Failures as for [`owner`](Self::owner). Defaults to `None`: an
    /// existing file keeps its group, a new one gets the server's default.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Refuses a mode over `0o7777` and names that could not be a user or group.
    fn check(&self) -> Result<(Option<Account>, Option<Account>)> {
        if let Some(mode) = self.mode.filter(|m| *m > 0o7777) {
            return Err(Error::InvalidInput {
                reason: format!("push mode {mode:o} is over 7777"),
            });
        }
        let owner = self.owner.as_deref().map(Account::parse).transpose()?;
        let group = self.group.as_deref().map(Account::parse).transpose()?;
        Ok((owner, group))
    }

    /// What a pushed file whose local bits are `local` gets on a host where the owner and
    /// group resolved to `ids`.
    fn file_rule(&self, local: u32, ids: Ids) -> FileRule {
        let mode = match self.mode {
            Some(mode) => ModeRule::Set(mode),
            None if self.local_modes => ModeRule::Set(local),
            None => ModeRule::KeepOrNew(local),
        };
        FileRule {
            mode,
            uid: ids.uid,
            gid: ids.gid,
        }
    }
}

/// An owner or group as given: a numeric id, used as it is, or a name to look up on each
/// host.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Account {
    Id(u32),
    Name(String),
}

impl Account {
    /// All digits: an id (below `u32::MAX`, chown's "leave as is"); otherwise a name made of
    /// the portable characters of POSIX user names (letters, digits, `.`, `_`, `-` but not
    /// first), plus `@` and a final `$` some directories use. Nothing else is sent to a
    /// host's shell.
    fn parse(text: &str) -> Result<Self> {
        let invalid = |why: &str| Error::InvalidInput {
            reason: format!("{text:?} is not a user or group name: {why}"),
        };
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return match text.parse::<u32>() {
                Ok(id) if id < u32::MAX => Ok(Account::Id(id)),
                _ => Err(invalid("the id is too large")),
            };
        }
        let body = text.strip_suffix('$').unwrap_or(text);
        if body.is_empty() || body.len() > 256 {
            return Err(invalid("empty or too long"));
        }
        if body.starts_with('-') {
            return Err(invalid("it starts with `-`"));
        }
        if !body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@'))
        {
            return Err(invalid(
                "only letters, digits, `.`, `_`, `-`, `@` and a final `$` are accepted",
            ));
        }
        Ok(Account::Name(text.to_owned()))
    }
}

/// An owner and group as ids on one host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Ids {
    uid: Option<u32>,
    gid: Option<u32>,
}

/// The exit code of the lookup script when the user does not exist on the host.
const NO_SUCH_USER: u32 = 3;
/// The exit code of the lookup script when the group does not exist on the host.
const NO_SUCH_GROUP: u32 = 4;

/// The script that prints `user <uid>` and `group <gid>` for the names given.
fn lookup_script(user: Option<&str>, group: Option<&str>) -> Vec<u8> {
    let mut script = Vec::new();
    if let Some(user) = user {
        script.extend_from_slice(b"u=$(id -u ");
        script.extend_from_slice(&quote(user.as_bytes()));
        script.extend_from_slice(
            format!(" 2>/dev/null) || exit {NO_SUCH_USER}\nprintf 'user %s\\n' \"$u\"\n")
                .as_bytes(),
        );
    }
    if let Some(group) = group {
        let name = quote(group.as_bytes());
        script.extend_from_slice(b"n=");
        script.extend_from_slice(&name);
        // getent asks every source nsswitch knows (LDAP, sssd); without it, /etc/group.
        script.extend_from_slice(
            format!(
                "\nif command -v getent >/dev/null 2>&1; then l=$(getent group \"$n\")\n\
                 else l=$(awk -F: -v n=\"$n\" '$1 == n {{ print; exit }}' /etc/group); fi\n\
                 g=${{l#*:*:}}; g=${{g%%:*}}\n\
                 case $g in ''|*[!0-9]*) exit {NO_SUCH_GROUP} ;; esac\n\
                 printf 'group %s\\n' \"$g\"\n"
            )
            .as_bytes(),
        );
    }
    script
}

/// The owner and group of `options` as ids on this host: numeric ones as they are, names
/// looked up there (one exec, and only when a name is given).
async fn resolve_ids(
    executor: &SshExecutor,
    owner: Option<&Account>,
    group: Option<&Account>,
) -> Result<Ids> {
    let mut ids = Ids::default();
    let name = |account: Option<&Account>| match account {
        Some(Account::Name(name)) => Some(name.clone()),
        _ => None,
    };
    if let Some(Account::Id(uid)) = owner {
        ids.uid = Some(*uid);
    }
    if let Some(Account::Id(gid)) = group {
        ids.gid = Some(*gid);
    }
    let (user_name, group_name) = (name(owner), name(group));
    if user_name.is_none() && group_name.is_none() {
        return Ok(ids);
    }
    let script = lookup_script(user_name.as_deref(), group_name.as_deref());
    let (status, out) = crate::files::run_collect(executor, &script, Vec::new()).await?;
    let unknown = |kind, name: Option<String>| Error::UnknownAccount {
        host: executor.host().to_owned(),
        kind,
        name: name.unwrap_or_default(),
    };
    match status {
        ExitStatus::Code(0) => {}
        ExitStatus::Code(NO_SUCH_USER) => return Err(unknown(AccountKind::User, user_name)),
        ExitStatus::Code(NO_SUCH_GROUP) => return Err(unknown(AccountKind::Group, group_name)),
        other => {
            return Err(Error::InvalidInput {
                reason: format!(
                    "looking up the push's owner and group on {} failed ({other:?}): {}",
                    executor.host(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        match line.split_once(' ') {
            Some(("user", id)) => ids.uid = id.trim().parse().ok(),
            Some(("group", id)) => ids.gid = id.trim().parse().ok(),
            _ => {}
        }
    }
    if user_name.is_some() && ids.uid.is_none() {
        return Err(unknown(AccountKind::User, user_name));
    }
    if group_name.is_some() && ids.gid.is_none() {
        return Err(unknown(AccountKind::Group, group_name));
    }
    Ok(ids)
}

/// What a push did to one file on one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FileChange {
    /// There was no file: it was written.
    Created,
    /// Its content (SHA-256), owner, group or mode differed: it was written (replaced
    /// atomically).
    Changed,
    /// It already had the content, owner, group and mode the push would give it: nothing
    /// was written (its inode and modification time are as they were). Ansible's "ok",
    /// pyinfra's "No change".
    Unchanged,
}

impl FileChange {
    /// The change in one word (`created`, `changed`, `unchanged`), as summaries and JSON
    /// records carry it. These words do not change.
    pub fn word(self) -> &'static str {
        match self {
            FileChange::Created => "created",
            FileChange::Changed => "changed",
            FileChange::Unchanged => "unchanged",
        }
    }
}

impl std::fmt::Display for FileChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

/// One file of a push on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PushedFile {
    /// The remote path written (or left alone).
    pub path: PathBuf,
    /// What the push did to it.
    pub change: FileChange,
}

/// What a push did on one host ([`HostResult::pushed`](super::HostResult::pushed)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PushedFiles {
    /// Where the push landed: the file, or the directory the tree was copied into.
    pub root: PathBuf,
    /// Every file of the push, in the source's order: a directory's files by name, then
    /// its subdirectories' (depth first, by name).
    pub files: Vec<PushedFile>,
}

impl PushedFiles {
    /// How many files the push did `change` to.
    pub fn count(&self, change: FileChange) -> usize {
        self.files.iter().filter(|f| f.change == change).count()
    }

    /// `true` when a file was written (Ansible's `changed`); `false` when every file was
    /// [`Unchanged`](FileChange::Unchanged).
    pub fn changed(&self) -> bool {
        self.files.iter().any(|f| f.change != FileChange::Unchanged)
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

/// One file of a push on one host: where it goes, the attributes it gets, and what the push
/// does to it (`None` until its content is compared).
struct Plan<'a> {
    file: &'a SourceFile,
    target: PathBuf,
    rule: FileRule,
    change: Option<FileChange>,
}

/// Whether a file that is there already has the bits, owner and group `rule` gives it.
fn attributes_match(metadata: &FileMetadata, rule: FileRule) -> bool {
    let bits = metadata.permissions & 0o7777;
    rule.mode.bits(Some(bits)) & 0o7777 == bits
        && rule.uid.is_none_or(|uid| metadata.uid == Some(uid))
        && rule.gid.is_none_or(|gid| metadata.gid == Some(gid))
}

/// The SHA-256 of each remote file, and how it was computed: on the host, or by reading the
/// files back over SFTP when the host has neither `sha256sum` nor `shasum`.
async fn digests_of(
    executor: &SshExecutor,
    paths: &[PathBuf],
) -> Result<(Vec<String>, &'static str)> {
    if let Some(digests) = remote_digests(executor, paths).await? {
        return Ok((digests, "sha256 verified on the host"));
    }
    let read_back = futures::stream::iter(paths.iter())
        .map(|path| executor.read_unaudited(path))
        .buffered(FILES_IN_FLIGHT)
        .try_collect::<Vec<Vec<u8>>>()
        .await?;
    let digests = read_back.iter().map(|bytes| sha256_hex(bytes)).collect();
    Ok((
        digests,
        "sha256 verified by reading back (no sha256sum or shasum on the host)",
    ))
}

/// A relative path on one line of a summary: control characters (a newline in a name)
/// escaped.
fn one_line(path: &Path) -> String {
    path.to_string_lossy()
        .chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// A host's summary: `pushed <count> to <root>: <changes>; <check>`, then, for a directory
/// whose files did not all fare alike, one `<change> <relative path>` line per file. Hosts
/// that fared alike get the same text, so folding gathers them.
fn push_summary(source: &PushSource, root: &Path, files: &[PushedFile], how: &str) -> String {
    let counts: Vec<(usize, FileChange)> = [
        FileChange::Created,
        FileChange::Changed,
        FileChange::Unchanged,
    ]
    .into_iter()
    .map(|change| (files.iter().filter(|f| f.change == change).count(), change))
    .filter(|(n, _)| *n > 0)
    .collect();
    let words = match counts.as_slice() {
        [(1, change)] => change.word().to_owned(),
        _ => counts
            .iter()
            .map(|(n, change)| format!("{n} {change}"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let mut text = format!(
        "pushed {} to {}: {words}; {how}\n",
        source.count(),
        root.display()
    );
    if counts.len() > 1 {
        for (file, pushed) in source.files.iter().zip(files) {
            let relative = one_line(&file.relative);
            text.push_str(&format!("{:<9} {relative}\n", pushed.change.word()));
        }
    }
    text
}

async fn push_one(
    executor: &SshExecutor,
    source: &PushSource,
    dest: &Path,
    options: &PushOptions,
    accounts: &(Option<Account>, Option<Account>),
) -> Result<Attempted> {
    let root = push_root(executor, source, dest).await?;
    // Names first: a host without the owner or group fails before anything is written.
    let ids = resolve_ids(executor, accounts.0.as_ref(), accounts.1.as_ref()).await?;
    if source.is_dir {
        executor.create_dir_all(&root).await?;
        for dir in &source.dirs {
            executor.create_dir_all(&root.join(dir)).await?;
        }
    }
    // Every file with where it goes, what it gets and what is there now (a stat per file,
    // many in flight on the one SFTP channel).
    let mut plans: Vec<Plan<'_>> = futures::stream::iter(source.files.iter())
        .map(|file| {
            let target = if file.relative.as_os_str().is_empty() {
                root.clone()
            } else {
                root.join(&file.relative)
            };
            let rule = options.file_rule(file.mode, ids);
            async move {
                let change = match executor.metadata(&target).await {
                    Ok(metadata)
                        if metadata.is_file()
                            && metadata.size == file.content.len() as u64
                            && attributes_match(&metadata, rule) =>
                    {
                        // It looks alike: its content decides.
                        None
                    }
                    Err(Error::Sftp {
                        status: Some(SftpStatus::NoSuchFile),
                        ..
                    }) => Some(FileChange::Created),
                    // Different, or not known (a permission problem, no SFTP): written, and
                    // the write reports what is wrong.
                    _ => Some(FileChange::Changed),
                };
                Plan {
                    file,
                    target,
                    rule,
                    change,
                }
            }
        })
        .buffered(STATS_IN_FLIGHT)
        .collect()
        .await;
    let alike: Vec<PathBuf> = plans
        .iter()
        .filter(|plan| plan.change.is_none())
        .map(|plan| plan.target.clone())
        .collect();
    if !alike.is_empty() {
        let (digests, _) = digests_of(executor, &alike).await?;
        let mut digests = digests.iter();
        for plan in plans.iter_mut().filter(|plan| plan.change.is_none()) {
            plan.change = Some(if digests.next() == Some(&plan.file.sha256) {
                FileChange::Unchanged
            } else {
                FileChange::Changed
            });
        }
    }
    let written: Vec<&Plan<'_>> = plans
        .iter()
        .filter(|plan| plan.change != Some(FileChange::Unchanged))
        .collect();
    futures::stream::iter(written.iter())
        .map(|plan| executor.write_resolved_with(&plan.target, &plan.file.content, plan.rule))
        .buffer_unordered(FILES_IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await?;
    let how = if written.is_empty() {
        "nothing written"
    } else {
        let paths: Vec<PathBuf> = written.iter().map(|plan| plan.target.clone()).collect();
        let (digests, how) = digests_of(executor, &paths).await?;
        for (plan, actual) in written.iter().zip(&digests) {
            if &plan.file.sha256 != actual {
                return Err(mismatch(executor, &plan.target, &plan.file.sha256, actual));
            }
        }
        how
    };
    let files: Vec<PushedFile> = plans
        .into_iter()
        .map(|plan| PushedFile {
            path: plan.target,
            change: plan.change.unwrap_or(FileChange::Changed),
        })
        .collect();
    let summary = push_summary(source, &root, &files, how);
    Ok(Attempted {
        execution: summary_execution(executor.host(), ExitStatus::Code(0), summary),
        pushed: Some(PushedFiles { root, files }),
    })
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
    /// `0640`); a new file gets the local file's bits ([`push_with`](Self::push_with) sets
    /// them, or the owner and group, on every file: [`PushOptions`]). Missing directories
    /// are created (with the server's default mode).
    ///
    /// A file that is already there with the same size, the same attributes and the same
    /// SHA-256 (computed on the host) is left alone: nothing is written, its inode and
    /// modification time stay, and it is reported [`FileChange::Unchanged`]. The others are
    /// written, and afterwards their SHA-256 is computed on the host with `sha256sum` (or
    /// `shasum -a 256`) and compared with the source's. A host with neither tool has the
    /// files read back over SFTP and compared instead; the host's summary line says which
    /// check ran. Symlinks to files are followed; symlinked directories and special files
    /// are not copied (the summary counts them).
    ///
    /// Every host gets its own result: a host's failure does not stop the others, and
    /// batches, thresholds, fail-fast, retries of unreachable hosts and the per-host
    /// deadline apply as for [`run`](Self::run). What was done to each file is in the
    /// host's [`HostResult::pushed`](super::HostResult::pushed). A host's output is a summary
    /// line (`pushed 3 files, 1234 bytes to /etc/app: 1 changed, 2 unchanged; sha256
    /// verified on the host`, or for one file `...: unchanged; nothing written`), followed,
    /// when a tree's files did not all fare alike, by one `<change> <relative path>` line
    /// per file; a digest that differs after the copy fails the host with
    /// [`Error::ChecksumMismatch`].
    ///
    /// # Errors
    /// [`Error::LocalFile`] when `source` cannot be read, [`Error::InvalidInput`] for a mode
    /// over `0o7777` or an owner or group that cannot be a name (no host is started).
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

    /// [`push`](Self::push) with `options`: the local modes, or a mode, an owner and a
    /// group for every file (see [`PushOptions`]). Owner and group names are looked up on
    /// each host before anything is written there; a host without one fails with
    /// [`Error::UnknownAccount`], and a host that refuses the change (a login that is not
    /// root, without [`Become`](crate::Become)) with [`Error::Sftp`]: either way its files
    /// keep their old content.
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
        let accounts = options.check()?;
        let path = source.to_owned();
        let source = tokio::task::spawn_blocking(move || PushSource::read(&path))
            .await
            .map_err(|e| Error::InvalidInput {
                reason: format!("reading the push source failed: {e}"),
            })??;
        let source = Arc::new(source);
        let accounts = &accounts;
        let report = self
            .run_each(
                |_, executor| {
                    let source = source.clone();
                    async move { push_one(executor, &source, dest, options, accounts).await }
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
    use super::*;

    #[test]
    fn owners_are_ids_or_portable_names() {
        assert_eq!(Account::parse("1000").ok(), Some(Account::Id(1000)));
        assert_eq!(
            Account::parse("www-data").ok(),
            Some(Account::Name("www-data".into()))
        );
        assert_eq!(
            Account::parse("host$").ok(),
            Some(Account::Name("host$".into()))
        );
        for bad in ["", "-rf", "a b", "x;y", "$(id)", "4294967295", "a$b"] {
            assert!(Account::parse(bad).is_err(), "{bad:?}");
        }
        let options = PushOptions::default().mode(0o10000);
        assert!(matches!(options.check(), Err(Error::InvalidInput { .. })));
    }

    /// The lookup script, run here with `sh` as a host runs it: known names give ids, an
    /// unknown user or group its own exit code.
    #[test]
    fn the_lookup_script_resolves_names_and_tells_unknown_ones() {
        let run = |user: Option<&str>, group: Option<&str>| {
            let script = lookup_script(user, group);
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(String::from_utf8_lossy(&script).as_ref())
                .output()
                .unwrap_or_else(|e| unreachable!("sh: {e}"));
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        };
        assert_eq!(
            run(Some("root"), Some("root")),
            (Some(0), "user 0\ngroup 0\n".to_owned())
        );
        assert_eq!(
            run(Some("no-such-user-swiftide"), None).0,
            Some(NO_SUCH_USER as i32)
        );
        assert_eq!(
            run(None, Some("no-such-group-swiftide")).0,
            Some(NO_SUCH_GROUP as i32)
        );
    }

    #[test]
    fn summaries_say_what_each_file_became_when_they_differ() {
        let file = |name: &str| SourceFile {
            relative: PathBuf::from(name),
            content: b"x".to_vec(),
            mode: 0o644,
            sha256: String::new(),
        };
        let source = PushSource {
            name: "app".into(),
            is_dir: true,
            dirs: Vec::new(),
            files: vec![file("a"), file("new\nline")],
            bytes: 2,
            skipped: 0,
        };
        let pushed = |changes: [FileChange; 2]| -> Vec<PushedFile> {
            changes
                .into_iter()
                .map(|change| PushedFile {
                    path: PathBuf::new(),
                    change,
                })
                .collect()
        };
        let root = Path::new("/srv/app");
        assert_eq!(
            push_summary(
                &source,
                root,
                &pushed([FileChange::Unchanged; 2]),
                "nothing written"
            ),
            "pushed 2 files, 2 bytes to /srv/app: 2 unchanged; nothing written\n"
        );
        assert_eq!(
            push_summary(
                &source,
                root,
                &pushed([FileChange::Changed, FileChange::Unchanged]),
                "sha256 verified on the host"
            ),
            "pushed 2 files, 2 bytes to /srv/app: 1 changed, 1 unchanged; sha256 verified on \
             the host\nchanged   a\nunchanged new\\nline\n"
        );
    }

    #[test]
    fn host_names_make_safe_directory_names() {
        assert_eq!(local_dir_name("web01"), "web01");
        assert_eq!(local_dir_name("ci@web-2:2222"), "ci@web-2:2222");
        assert_eq!(local_dir_name("a/b"), "a_b");
        assert_eq!(local_dir_name(".."), "_..");
        assert_eq!(local_dir_name(""), "_");
    }
}
