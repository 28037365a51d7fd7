//! OpenSSH `known_hosts` parsing and host-key matching.
//!
//! Follows sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT" and the behaviour of OpenSSH's
//! `hostfile.c` / `match.c` closely, because users point us at the very files `ssh` writes
//! and expect the same answer `ssh` would give. Deliberate differences are noted where they
//! occur (chiefly: `@revoked` applies whatever its host field says, a `@revoked` line that
//! cannot be read refuses the hosts it names instead of being skipped, and host certificates
//! are not supported, so `@cert-authority` lines are parsed but never trust anything).
//!
//! Everything here is synchronous and pure except [`KnownHosts::load`] and [`append`];
//! async callers should run those on a blocking thread.

use std::collections::HashMap;
use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use data_encoding::BASE64;
use hmac::{Hmac, KeyInit, Mac};
use russh::keys::ssh_encoding::Encode;
use russh::keys::{Algorithm, HashAlg, PublicKey, parse_public_key_base64};
use sha1::Sha1;

/// Result of checking a server key against known_hosts data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A line whose host patterns match names this exact key.
    Trusted,
    /// No line matches this host at all.
    Unknown,
    /// Lines match this host but none names this key; `line` is the 1-based line number of
    /// the first such line.
    Changed { line: usize },
    /// The key is listed under `@revoked` (1-based `line`): refuse it even if another line
    /// trusts it.
    Revoked { line: usize },
    /// A `@revoked` line naming this host (or whose host field cannot be read) has a key
    /// that cannot be read (1-based `line`): it may revoke this very key, so the host is
    /// refused whatever key it presents.
    UnreadableRevocation { line: usize },
}

/// The optional marker in front of a known_hosts line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    /// A plain host key line.
    None,
    /// `@cert-authority`: the key signs host certificates. Kept so the data model is
    /// complete, but host certificates are not supported, so such lines never trust a key.
    CertAuthority,
    /// `@revoked`: the key must never be accepted.
    Revoked,
}

/// The host field of a line, in the form it is matched in.
#[derive(Debug, Clone)]
enum Hosts {
    /// A comma-separated pattern list (`*`, `?`, leading `!` negation).
    Patterns(String),
    /// `|1|salt|hash`: one hashed name. The whole field is kept because OpenSSH compares the
    /// re-encoded hash text against it, not the decoded bytes.
    Hashed {
        /// The decoded 20-byte HMAC key.
        salt: Vec<u8>,
        /// The field exactly as written.
        field: String,
    },
}

/// A `@revoked` line that could not be read.
#[derive(Debug, Clone)]
struct UnreadableRevocation {
    /// The hosts it names; `None` when the host field cannot be read either: then every
    /// host.
    hosts: Option<Hosts>,
    /// 1-based line number within its file.
    line: usize,
    /// As [`Entry::origin`].
    origin: Option<Arc<Path>>,
}

/// One valid known_hosts line.
#[derive(Debug, Clone)]
struct Entry {
    /// `@cert-authority` / `@revoked` / none.
    marker: Marker,
    /// Which names the line applies to.
    hosts: Hosts,
    /// The key on the line.
    key: PublicKey,
    /// 1-based line number within its file (or text), for messages.
    line: usize,
    /// The file the line came from; `None` for text given to [`KnownHosts::parse`]. Shared
    /// because every entry of a file carries the same path.
    origin: Option<Arc<Path>>,
}

/// Parsed known_hosts data, possibly merged from several files.
#[derive(Debug, Clone, Default)]
pub(crate) struct KnownHosts {
    /// One per file, in merge order (the user file first, then the global one, as OpenSSH
    /// consults them); text given to [`parse`](Self::parse) is one.
    files: Vec<FileLines>,
}

/// The lines of one file, in line order, with an index that finds a host's lines.
///
/// Why the index: a fleet with accept-new checks each of its hosts against a file that ends
/// up listing all of them. Matching every line's host field per check made 10,000 hosts cost
/// 10,000 × 10,000 pattern matches, and client CPU per host grew with the fleet (2.6× at
/// 10,000 hosts of what it was at 100, BENCHMARKS.md round 4).
#[derive(Debug, Clone, Default)]
struct FileLines {
    /// Valid lines in line order.
    entries: Vec<Entry>,
    /// Plain lines whose host field is a list of literal names (what `ssh` and accept-new
    /// write): by each name, lowercased, their positions in `entries`, ascending.
    by_name: HashMap<String, Vec<usize>>,
    /// Plain lines that need matching (wildcards, negations, hashed names), ascending.
    by_pattern: Vec<usize>,
    /// `@revoked` lines, ascending.
    revoked: Vec<usize>,
    /// `@revoked` lines that could not be read, in line order.
    unreadable_revocations: Vec<UnreadableRevocation>,
    /// Lines that were neither blank, comments, nor valid entries.
    skipped: usize,
}

impl FileLines {
    /// Adds `entry` after the lines so far, indexing it.
    fn push(&mut self, entry: Entry) {
        let position = self.entries.len();
        match entry.marker {
            Marker::Revoked => self.revoked.push(position),
            // Never trusts anything (host certificates are unsupported).
            Marker::CertAuthority => {}
            Marker::None => match literal_names(&entry.hosts) {
                Some(names) => {
                    for name in names {
                        let positions = self.by_name.entry(name).or_default();
                        // `a,a` names a host twice on one line.
                        if positions.last() != Some(&position) {
                            positions.push(position);
                        }
                    }
                }
                None => self.by_pattern.push(position),
            },
        }
        self.entries.push(entry);
    }

    /// Adds the lines of `later`, which follow these in the same file.
    fn append(&mut self, later: FileLines) {
        for entry in later.entries {
            self.push(entry);
        }
        self.unreadable_revocations
            .extend(later.unreadable_revocations);
        self.skipped += later.skipped;
    }

    /// The plain lines that may match `name` (lowercased), ascending: its own lines and
    /// every line that needs matching. Callers still match each one.
    fn candidates(&self, name: &str) -> Vec<usize> {
        let named = self.by_name.get(name).map_or(&[][..], Vec::as_slice);
        let mut positions: Vec<usize> = named.iter().chain(&self.by_pattern).copied().collect();
        positions.sort_unstable();
        positions
    }
}

/// The names a host field lists, lowercased, when it is nothing but literal names: then a
/// name matches it exactly when it is one of them. `None` for anything [`hosts_match`] must
/// look at (wildcards, negations, hashed names, a piece too long for OpenSSH's buffer).
fn literal_names(hosts: &Hosts) -> Option<Vec<String>> {
    let Hosts::Patterns(list) = hosts else {
        return None;
    };
    // An empty list never matches; `match_pattern_list` ignores one final comma.
    if list.is_empty() {
        return Some(Vec::new());
    }
    let list = list.strip_suffix(',').unwrap_or(list);
    list.split(',')
        .map(|piece| {
            let plain =
                piece.len() < 1023 && !piece.starts_with('!') && !piece.contains(['*', '?']);
            plain.then(|| piece.to_ascii_lowercase())
        })
        .collect()
}

impl KnownHosts {
    /// Parse text. Invalid lines (bad base64, unknown key type, missing fields, unknown
    /// marker) are skipped, as OpenSSH does; count them in `skipped_lines()`. An invalid
    /// line that says `@revoked` is kept as an unreadable revocation instead (and counted).
    #[cfg(test)]
    pub(crate) fn parse(text: &str) -> KnownHosts {
        KnownHosts {
            files: vec![FileLines::parse_from(text, 1)],
        }
    }
}

impl FileLines {
    /// [`KnownHosts::parse`] text whose first line is line `first_line` of its file.
    fn parse_from(text: &str, first_line: usize) -> FileLines {
        let mut hosts = FileLines::default();
        for (index, raw) in text.split('\n').enumerate() {
            // OpenSSH reads lines as C strings: a NUL ends the line (`strcspn(line, "\n")`),
            // so a host field with a NUL in it leaves a line without a key, and bytes after
            // a key are ignored.
            let line = raw.split('\0').next().unwrap_or(raw);
            // CRLF files: blank and comment lines stay blank and comments (a `\r` left in
            // a key field is skipped by the base64 rule below, as OpenSSH does).
            let line = line.strip_suffix('\r').unwrap_or(line);
            let number = index + first_line;
            match parse_line(line, number) {
                Ok(Some(entry)) => hosts.push(entry),
                Ok(None) => {}
                Err(Invalid) => {
                    hosts.skipped += 1;
                    if let Some(revocation) = unreadable_revocation(line, number) {
                        hosts.unreadable_revocations.push(revocation);
                    }
                }
            }
        }
        hosts
    }

    /// Parses a file's bytes (or the part of them from line `first_line` on).
    fn from_bytes(bytes: &[u8], first_line: usize, path: &Path) -> FileLines {
        // Keys and the names we look up are ASCII; lossy decoding only alters lines that
        // could never match anyway, and must not make the whole file unreadable.
        let mut hosts = FileLines::parse_from(&String::from_utf8_lossy(bytes), first_line);
        let origin: Arc<Path> = Arc::from(path);
        for entry in &mut hosts.entries {
            entry.origin = Some(Arc::clone(&origin));
        }
        for revocation in &mut hosts.unreadable_revocations {
            revocation.origin = Some(Arc::clone(&origin));
        }
        hosts
    }
}

impl KnownHosts {
    /// Read and parse a file. A missing file is `Ok(empty)`; any other read error
    /// (permission denied, is a directory, ...) is `Err` so the caller can fail closed.
    #[cfg(test)]
    pub(crate) fn load(path: &Path) -> io::Result<KnownHosts> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(KnownHosts::default()),
            Err(e) => return Err(e),
        };
        Ok(KnownHosts {
            files: vec![FileLines::from_bytes(&bytes, 1, path)],
        })
    }

    /// Checks `key` presented by `host`:`port` (as [`check_detailed`](Self::check_detailed))
    /// against every file of `paths`, merged in order, parsing them only when they changed.
    ///
    /// The parsed files are kept (a few distinct file lists; an executor has one) and reused
    /// while no file has changed (same size, modification time and inode). A file that grew
    /// by whole lines (accept-new appends) has only its new lines parsed ([`Cached::grow`]).
    /// The check runs under the cache's lock, on the cached data itself.
    ///
    /// Why: every new connection checks its host key, and a fleet of a thousand hosts shares
    /// one known_hosts file of a thousand lines: parsing it per connection cost 0.6–0.7 ms of
    /// client CPU per host there. With accept-new the file grows by a line per host, so a
    /// fleet that records 10,000 hosts would parse 50 million lines. And under the lock,
    /// 100 connections recording their hosts at once neither parse the file each (as when
    /// one of them had taken the cached parse out to extend it) nor copy it (as when the
    /// parse was shared and one of them extended it).
    ///
    /// Blocking (file reads): async callers run it on a blocking thread.
    pub(crate) fn check_cached(
        paths: &[PathBuf],
        host: &str,
        port: u16,
        key: &PublicKey,
    ) -> Result<(Verdict, Option<PathBuf>), (PathBuf, io::Error)> {
        Self::with_cached(paths, |hosts| hosts.check_detailed(host, port, key))
    }

    /// Runs `f` on the cached, up-to-date parse of `paths` (see
    /// [`check_cached`](Self::check_cached)).
    fn with_cached<T>(
        paths: &[PathBuf],
        f: impl FnOnce(&KnownHosts) -> T,
    ) -> Result<T, (PathBuf, io::Error)> {
        const KEPT: usize = 8;

        // The stamps are taken under the lock: taken before it, they could predate an
        // append this process made meanwhile (see `Cached::own_append`), which would make
        // the cached parse look newer than the file and parse it all again.
        let mut cache = lock_cache();
        let mut key = Vec::with_capacity(paths.len());
        for path in paths {
            key.push((path.clone(), stamp(path).map_err(|e| (path.clone(), e))?));
        }
        let same_paths = |cached: &&mut Cached| cached.key.iter().map(|(p, _)| p).eq(paths.iter());
        if let Some(cached) = cache.iter_mut().find(same_paths) {
            // A list that did not grow by whole lines may be half extended: parse it again.
            if cached.key != key && !cached.grow(&key) {
                *cached = Cached::load(key, paths)?;
            }
            return Ok(f(&cached.hosts));
        }
        let fresh = Cached::load(key, paths)?;
        let answer = f(&fresh.hosts);
        if cache.len() >= KEPT {
            cache.remove(0);
        }
        cache.push(fresh);
        Ok(answer)
    }

    /// The cached parse of `paths`, as [`check_cached`](Self::check_cached) sees it.
    #[cfg(test)]
    pub(crate) fn load_all_cached(paths: &[PathBuf]) -> Result<KnownHosts, (PathBuf, io::Error)> {
        Self::with_cached(paths, KnownHosts::clone)
    }

    /// Merge another file's entries after this one's (user file first, then the global
    /// file, as OpenSSH consults them), keeping each entry's origin path for messages.
    #[cfg(test)]
    pub(crate) fn extend(&mut self, other: KnownHosts) {
        self.files.extend(other.files);
    }

    /// Check `key` presented by `host`:`port`. See [`Verdict`] for the meaning of each
    /// answer; `@cert-authority` lines are ignored since host certificates are unsupported.
    #[allow(dead_code)] // For callers that do not report the file; `check_detailed` does.
    pub(crate) fn check(&self, host: &str, port: u16, key: &PublicKey) -> Verdict {
        self.check_detailed(host, port, key).0
    }

    /// Like [`check`](Self::check), also returning the file of the line the verdict's line
    /// number refers to (`None` for `Unknown` and for entries from [`parse`](Self::parse)).
    pub(crate) fn check_detailed(
        &self,
        host: &str,
        port: u16,
        key: &PublicKey,
    ) -> (Verdict, Option<PathBuf>) {
        let origin = |entry: &Entry| entry.origin.as_deref().map(Path::to_path_buf);

        // A revoked key "must not ever be accepted", so this beats any trusting line and,
        // unlike OpenSSH (which only consults `@revoked` lines matching the host), ignores
        // the host field: failing closed is the safer reading.
        let revoked = self.files.iter().flat_map(|file| {
            file.revoked
                .iter()
                .filter_map(|&position| file.entries.get(position))
        });
        if let Some(entry) = revoked.into_iter().find(|e| same_key(&e.key, key)) {
            return (Verdict::Revoked { line: entry.line }, origin(entry));
        }

        // `ssh` lowercases the host name before any lookup; hashed names are hashed in
        // lowercase too (`ssh-keygen -H` does the same).
        let name = lookup_name(host, port).to_ascii_lowercase();

        // A revocation we cannot read may name this very key (`ssh` reads some key fields
        // we once did not): fail closed for the hosts it names.
        let unreadable = self
            .files
            .iter()
            .flat_map(|file| &file.unreadable_revocations);
        if let Some(revocation) = unreadable.into_iter().find(|r| {
            r.hosts
                .as_ref()
                .is_none_or(|hosts| hosts_match(hosts, &name))
        }) {
            let file = revocation.origin.as_deref().map(Path::to_path_buf);
            return (
                Verdict::UnreadableRevocation {
                    line: revocation.line,
                },
                file,
            );
        }
        let mut first_mismatch: Option<&Entry> = None;
        let plain = self.files.iter().flat_map(|file| {
            file.candidates(&name)
                .into_iter()
                .filter_map(|position| file.entries.get(position))
        });
        for entry in plain {
            if !hosts_match(&entry.hosts, &name) {
                continue;
            }
            // Several lines may list one host (key rotation, several key types): any match
            // trusts.
            if same_key(&entry.key, key) {
                return (Verdict::Trusted, origin(entry));
            }
            first_mismatch.get_or_insert(entry);
        }
        match first_mismatch {
            Some(entry) => (Verdict::Changed { line: entry.line }, origin(entry)),
            None => (Verdict::Unknown, None),
        }
    }

    /// How many lines were invalid and skipped (not counting blank and comment lines).
    #[allow(dead_code)] // For diagnostics callers may add.
    pub(crate) fn skipped_lines(&self) -> usize {
        self.files.iter().map(|file| file.skipped).sum()
    }

    /// Whether no valid line was parsed.
    #[allow(dead_code)] // For diagnostics callers may add.
    pub(crate) fn is_empty(&self) -> bool {
        self.files.iter().all(|file| file.entries.is_empty())
    }
}

/// The name OpenSSH looks up: `host` when port is 22, else `[host]:port`. Port 0 also gives
/// the bare host, as in OpenSSH's `put_host_port`.
pub(crate) fn lookup_name(host: &str, port: u16) -> String {
    if port == 22 || port == 0 {
        host.to_owned()
    } else {
        format!("[{host}]:{port}")
    }
}

/// Append a line for this host and key (OpenSSH format `name keytype base64`, no comment),
/// creating the file (mode 0600) and its parent directory (0700) if missing; make sure a
/// file that does not end with a newline gets one first. Used by an accept-new host-key
/// policy.
///
/// The name is written lowercased, as `ssh` does. A host that would change the meaning of
/// the line (whitespace, control characters, `,` `*` `?`, or a leading `!` `|` `@` `#`) is
/// refused with `InvalidInput` rather than written, since e.g. `evil,*` would trust the key
/// for every host.
pub(crate) fn append(path: &Path, host: &str, port: u16, key: &PublicKey) -> io::Result<()> {
    if !host_is_literal(host) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to record host name {host:?} in known_hosts"),
        ));
    }
    let blob = key.to_bytes().map_err(io::Error::other)?;
    let line = format!(
        "{} {} {}\n",
        lookup_name(&host.to_ascii_lowercase(), port),
        key.algorithm().as_str(),
        BASE64.encode(&blob)
    );

    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        let mut builder = DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(parent)?;
    }

    // Held over the write, so that the cached parses can take this line as the file's
    // growth without reading the file again (see `Cached::own_append`).
    let mut cache = lock_cache();
    let mut options = OpenOptions::new();
    options.read(true).append(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    let before = stamp_of(&file.metadata()?)?;

    // Otherwise the new entry would be glued onto the last line and both would be lost.
    let mut out = Vec::with_capacity(line.len() + 1);
    if file.metadata()?.len() > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::End(-1))?;
        file.read_exact(&mut last)?;
        if last != *b"\n" {
            out.push(b'\n');
        }
    }
    out.extend_from_slice(line.as_bytes());
    // One write in append mode, so a concurrent appender cannot split our line.
    file.write_all(&out)?;
    file.flush()?;
    let after = stamp_of(&file.metadata()?)?;
    for cached in cache.iter_mut() {
        cached.own_append(path, before, &out, after);
    }
    Ok(())
}

/// The SHA256 fingerprint text of a key as OpenSSH prints it, e.g. "SHA256:abc...".
pub(crate) fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

/// A file's size, modification time and inode; `None` when it does not exist.
type Stamp = Option<(std::time::SystemTime, u64, u64)>;

fn stamp(path: &Path) -> io::Result<Stamp> {
    match std::fs::metadata(path) {
        Ok(meta) => Ok(Some(stamp_of(&meta)?)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn stamp_of(meta: &std::fs::Metadata) -> io::Result<(std::time::SystemTime, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Ok((meta.modified()?, meta.len(), meta.ino()))
}

/// The parsed files [`KnownHosts::check_cached`] keeps, most recently added last.
static CACHE: std::sync::Mutex<Vec<Cached>> = std::sync::Mutex::new(Vec::new());

fn lock_cache() -> std::sync::MutexGuard<'static, Vec<Cached>> {
    // A poisoned lock only means a panic elsewhere while swapping entries.
    CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A parsed file list in [`KnownHosts::check_cached`]'s cache.
struct Cached {
    /// The files and their stamps when they were last looked at.
    key: Vec<(PathBuf, Stamp)>,
    hosts: KnownHosts,
    files: Vec<Parsed>,
}

/// What was parsed of one file of a [`Cached`] list.
struct Parsed {
    /// The bytes parsed, kept to tell a file that grew (they are its start) from one
    /// rewritten in place: comparing them costs far less than parsing them again.
    bytes: Vec<u8>,
    /// Line breaks in them: the next line is line `newlines + 1`.
    newlines: usize,
}

impl Cached {
    fn load(key: Vec<(PathBuf, Stamp)>, paths: &[PathBuf]) -> Result<Self, (PathBuf, io::Error)> {
        #[cfg(test)]
        tests::FULL_PARSES.with(|parses| parses.set(parses.get() + 1));
        let mut all = KnownHosts::default();
        let mut files = Vec::with_capacity(paths.len());
        for path in paths {
            let bytes = match std::fs::read(path) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err((path.clone(), e)),
            };
            all.files.push(FileLines::from_bytes(&bytes, 1, path));
            files.push(Parsed {
                newlines: bytes.iter().filter(|&&b| b == b'\n').count(),
                bytes,
            });
        }
        Ok(Cached {
            key,
            hosts: all,
            files,
        })
    }

    /// Takes a line this process appended to `path` as that file's growth, when the file
    /// was as cached right before (`before` is the cached stamp) and nothing else was
    /// written after it (`after` is exactly `bytes` longer, same file). Otherwise the next
    /// check finds the stamp changed and reads the file (see [`grow`](Self::grow)).
    ///
    /// Why: with accept-new, every new host appends a line, and every other connection's
    /// check then saw a grown file and compared its whole start again, so a 10,000-host run
    /// read the file about 10,000 times (quadratic in the hosts); now a process's own
    /// appends cost nothing to read back.
    fn own_append(
        &mut self,
        path: &Path,
        before: (std::time::SystemTime, u64, u64),
        bytes: &[u8],
        after: (std::time::SystemTime, u64, u64),
    ) {
        let Some(index) = self.key.iter().position(|(p, _)| p == path) else {
            return;
        };
        let (Some((_, stamp)), Some(parsed), Some(lines)) = (
            self.key.get_mut(index),
            self.files.get_mut(index),
            self.hosts.files.get_mut(index),
        ) else {
            return;
        };
        let ends_line = |b: &[u8]| b.last().is_none_or(|&last| last == b'\n');
        let grew_by_bytes = after.1.checked_sub(before.1) == Some(bytes.len() as u64);
        if *stamp != Some(before)
            || after.2 != before.2
            || !grew_by_bytes
            || parsed.bytes.len() as u64 != before.1
            || !ends_line(&parsed.bytes)
            || !ends_line(bytes)
        {
            return;
        }
        lines.append(FileLines::from_bytes(bytes, parsed.newlines + 1, path));
        parsed.newlines += bytes.iter().filter(|&&b| b == b'\n').count();
        parsed.bytes.extend_from_slice(bytes);
        *stamp = Some(after);
    }

    /// Brings this list up to date with the stamps `key` in place when every file is
    /// unchanged or only grew by whole lines: same inode, its parsed bytes still its start and
    /// ending a line, what follows them ending a line. The file may have grown further since
    /// it was stamped (another connection appending right now): what was read is parsed, and
    /// the next look finds it current. `false` for anything else (a rewrite, a file that
    /// shrank, appeared or vanished, a line being written right now): then the list is
    /// parsed again, and what this one holds must not be used.
    fn grow(&mut self, key: &[(PathBuf, Stamp)]) -> bool {
        if self.key.len() != key.len() {
            return false;
        }
        for (index, ((path, old), (_, new))) in self.key.iter().zip(key).enumerate() {
            let (Some(parsed), Some(lines)) =
                (self.files.get_mut(index), self.hosts.files.get_mut(index))
            else {
                return false;
            };
            let (old_ino, new_len, new_ino) = match (old, new) {
                (None, None) => continue,
                (Some(old), Some(new)) if old == new => continue,
                (Some((_, _, old_ino)), Some((_, new_len, new_ino))) => {
                    (*old_ino, *new_len, *new_ino)
                }
                _ => return false,
            };
            if old_ino != new_ino || new_len < parsed.bytes.len() as u64 {
                return false;
            }
            let ends_line = |b: &[u8]| b.last().is_none_or(|&last| last == b'\n');
            let old_len = parsed.bytes.len();
            let Ok(grown) = read_after_same_start(path, &parsed.bytes) else {
                return false;
            };
            if ((old_len + grown.len()) as u64) < new_len
                || !ends_line(&parsed.bytes)
                || !ends_line(&grown)
            {
                return false;
            }
            lines.append(FileLines::from_bytes(&grown, parsed.newlines + 1, path));
            parsed.newlines += grown.iter().filter(|&&b| b == b'\n').count();
            parsed.bytes.extend_from_slice(&grown);
        }
        self.key = key.to_vec();
        true
    }
}

/// What follows `start` in the file at `path`, if the file still starts with `start`.
///
/// Compared piece by piece through one small buffer: reading the whole file into a new
/// allocation per append cost a megabyte's allocation, page faults and copy per host once a
/// fleet's file held 10,000 hosts.
fn read_after_same_start(path: &Path, start: &[u8]) -> io::Result<Vec<u8>> {
    #[cfg(test)]
    tests::GROWTH_READS.with(|reads| reads.set(reads.get() + 1));
    let mut file = std::fs::File::open(path)?;
    let mut buffer = [0u8; 16 * 1024];
    let mut compared = 0;
    while compared < start.len() {
        let want = (start.len() - compared).min(buffer.len());
        let piece = buffer.get_mut(..want).unwrap_or_default();
        file.read_exact(piece)?;
        if start.get(compared..compared + want) != Some(&*piece) {
            return Err(io::Error::other("the file's start changed"));
        }
        compared += want;
    }
    let mut rest = Vec::new();
    file.read_to_end(&mut rest)?;
    Ok(rest)
}

/// Marker error: the line is not a valid entry.
struct Invalid;

/// Parse one line (without its line terminator). `Ok(None)` for blank and comment lines.
fn parse_line(line: &str, number: usize) -> Result<Option<Entry>, Invalid> {
    let rest = line.trim_start_matches([' ', '\t']);
    if rest.is_empty() || rest.starts_with('#') {
        return Ok(None);
    }

    // Markers are matched exactly (case-sensitive); OpenSSH rejects a second marker.
    let mut marker = Marker::None;
    let mut rest = rest;
    while rest.starts_with('@') {
        if marker != Marker::None {
            return Err(Invalid);
        }
        let (word, tail) = next_field(rest);
        marker = match word {
            "@cert-authority" => Marker::CertAuthority,
            "@revoked" => Marker::Revoked,
            _ => return Err(Invalid),
        };
        rest = tail.trim_start_matches([' ', '\t']);
    }

    let (hosts, rest) = next_field(rest);
    let (key_type, rest) = next_field(rest);
    let (blob, _comment) = next_field(rest);
    if hosts.is_empty() || key_type.is_empty() || key_type.starts_with('#') || blob.is_empty() {
        return Err(Invalid);
    }
    // OpenSSH's base64 decoder (`b64_pton`) skips whitespace anywhere in the key field:
    // after splitting at spaces and tabs, that leaves `\r`, vertical tab and form feed (two
    // trailing `\r`s of a converted file, say). Skipping fewer made us ignore `@revoked`
    // lines that `ssh` enforces.
    let blob: String = blob
        .chars()
        .filter(|c| !matches!(c, '\r' | '\x0b' | '\x0c' | '\n'))
        .collect();
    if blob.is_empty() {
        return Err(Invalid);
    }
    let blob = blob.as_str();

    Ok(Some(Entry {
        marker,
        hosts: parse_hosts(hosts)?,
        key: parse_key(key_type, blob)?,
        line: number,
        origin: None,
    }))
}

/// The unreadable revocation an invalid `line` stands for, if it says `@revoked` among its
/// markers. Its hosts are the field after the markers when that field can be read;
/// otherwise it applies to every host (there is no telling which it names).
fn unreadable_revocation(line: &str, number: usize) -> Option<UnreadableRevocation> {
    let mut rest = line.trim_start_matches([' ', '\t']);
    let mut revoked = false;
    while rest.starts_with('@') {
        let (word, tail) = next_field(rest);
        revoked |= word == "@revoked";
        rest = tail.trim_start_matches([' ', '\t']);
    }
    if !revoked {
        return None;
    }
    let (field, _) = next_field(rest);
    let hosts = (!field.is_empty() && !field.starts_with('#'))
        .then(|| parse_hosts(field).ok())
        .flatten();
    Some(UnreadableRevocation {
        hosts,
        line: number,
        origin: None,
    })
}

/// Split off the next field: fields are separated by runs of spaces or tabs (only those,
/// as in OpenSSH; russh's own parser splits on single spaces and misses tabbed lines).
fn next_field(text: &str) -> (&str, &str) {
    let text = text.trim_start_matches([' ', '\t']);
    let end = text.find([' ', '\t']).unwrap_or(text.len());
    text.split_at_checked(end).unwrap_or((text, ""))
}

/// Parse the host field. A hashed field whose salt is malformed is invalid, as OpenSSH
/// treats it.
fn parse_hosts(field: &str) -> Result<Hosts, Invalid> {
    if !field.starts_with('|') {
        return Ok(Hosts::Patterns(field.to_owned()));
    }
    let rest = field.strip_prefix("|1|").ok_or(Invalid)?;
    let (salt, _hash) = rest.split_once('|').ok_or(Invalid)?;
    let salt = BASE64.decode(salt.as_bytes()).map_err(|_| Invalid)?;
    // OpenSSH requires the salt to be exactly one SHA-1 output long.
    if salt.len() != 20 {
        return Err(Invalid);
    }
    Ok(Hosts::Hashed {
        salt,
        field: field.to_owned(),
    })
}

/// Parse `keytype base64` the way OpenSSH's `sshkey_read` accepts it.
fn parse_key(key_type: &str, blob: &str) -> Result<PublicKey, Invalid> {
    // Decoded here too for the blob length (checked below). Strict base64 (padding
    // required, trailing bits zero) is what OpenSSH's `b64_pton` accepts.
    let bytes = BASE64.decode(blob.as_bytes()).map_err(|_| Invalid)?;
    let key = parse_public_key_base64(blob).map_err(|_| Invalid)?;
    // OpenSSH rejects a blob with bytes after the key.
    if key.key_data().encoded_len().ok() != Some(bytes.len()) {
        return Err(Invalid);
    }
    let algorithm = key.algorithm();
    // Algorithms ssh-key only carries opaquely (certificates, vendor types) are not ones we
    // can be offered as plain host keys; treat them as unknown types.
    if matches!(algorithm, Algorithm::Other(_)) {
        return Err(Invalid);
    }
    // The named type must agree with the blob (including the ECDSA curve); OpenSSH also
    // accepts the RSA signature-algorithm names for an RSA key.
    let type_ok = key_type == algorithm.as_str()
        || (matches!(algorithm, Algorithm::Rsa { .. })
            && matches!(key_type, "rsa-sha2-256" | "rsa-sha2-512"));
    if !type_ok {
        return Err(Invalid);
    }
    Ok(key)
}

/// Whether two keys are the same key. Compares algorithm and key material only: russh's
/// `PublicKey ==` also compares comments, so a key read from a `.pub` file would not equal
/// its own comment-less known_hosts line.
fn same_key(a: &PublicKey, b: &PublicKey) -> bool {
    a.key_data() == b.key_data()
}

/// Whether a line's host field applies to `name` (already lowercased).
fn hosts_match(hosts: &Hosts, name: &str) -> bool {
    match hosts {
        Hosts::Patterns(list) => match_pattern_list(name, list),
        Hosts::Hashed { salt, field } => hash_host(salt, name).is_some_and(|h| h == *field),
    }
}

/// The `|1|salt|hash` text for `name` with this salt, as OpenSSH's `host_hash` makes it.
fn hash_host(salt: &[u8], name: &str) -> Option<String> {
    let mut mac = Hmac::<Sha1>::new_from_slice(salt).ok()?;
    mac.update(name.as_bytes());
    let hash = mac.finalize().into_bytes();
    Some(format!(
        "|1|{}|{}",
        BASE64.encode(salt),
        BASE64.encode(&hash)
    ))
}

/// OpenSSH's `match_pattern_list` with lowercasing: true if some positive pattern matches
/// and no negated one does.
fn match_pattern_list(name: &str, list: &str) -> bool {
    // OpenSSH's loop never looks at an empty piece after a final comma (nor at an empty
    // list), but does look at empty pieces elsewhere.
    if list.is_empty() {
        return false;
    }
    let list = list.strip_suffix(',').unwrap_or(list);
    let mut positive = false;
    for piece in list.split(',') {
        let (negated, pattern) = match piece.strip_prefix('!') {
            Some(pattern) => (true, pattern),
            None => (false, piece),
        };
        // OpenSSH copies each pattern into a 1024-byte buffer and declares the whole list
        // a non-match when one does not fit.
        if pattern.len() >= 1023 {
            return false;
        }
        if glob_match(name.as_bytes(), pattern.to_ascii_lowercase().as_bytes()) {
            if negated {
                return false;
            }
            positive = true;
        }
    }
    positive
}

/// `*` (any run of bytes) and `?` (any one byte) matching over bytes, like OpenSSH's
/// `match_pattern`, but iterative so hostile patterns cannot cause exponential work.
fn glob_match(text: &[u8], pattern: &[u8]) -> bool {
    let (mut t, mut p) = (0usize, 0usize);
    // Position after the last `*` seen, and the text position that `*` currently extends to.
    let mut star: Option<(usize, usize)> = None;
    loop {
        match pattern.get(p) {
            Some(b'*') => {
                p += 1;
                star = Some((p, t));
                continue;
            }
            Some(&c) if text.get(t).is_some_and(|&x| c == b'?' || c == x) => {
                t += 1;
                p += 1;
                continue;
            }
            None if t == text.len() => return true,
            _ => {}
        }
        // Mismatch: let the last `*` swallow one more byte, if any remain.
        match star {
            Some((after_star, swallowed)) if swallowed < text.len() => {
                star = Some((after_star, swallowed + 1));
                p = after_star;
                t = swallowed + 1;
            }
            _ => return false,
        }
    }
}

/// Whether `host` can be written as a known_hosts name that matches exactly itself.
fn host_is_literal(host: &str) -> bool {
    !host.is_empty()
        && !host.starts_with(['!', '|', '@', '#'])
        && !host
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, ',' | '*' | '?'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)] // Tests may fail loudly.
mod tests {
    use super::*;
    use russh::keys::PrivateKey;
    use std::process::Command;

    const SSH_KEYGEN: &str = "/usr/bin/ssh-keygen";

    thread_local! {
        /// How many times this thread parsed a cached file list from the start.
        pub(super) static FULL_PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        /// How many times this thread read a grown file's start to compare it.
        pub(super) static GROWTH_READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn growth_reads() -> usize {
        GROWTH_READS.with(std::cell::Cell::get)
    }

    fn full_parses() -> usize {
        FULL_PARSES.with(std::cell::Cell::get)
    }

    /// Fixed keys generated once with `ssh-keygen -t ecdsa` / `-t rsa -b 2048`, so tests
    /// need not generate slow RSA keys.
    const ECDSA_LINE: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBBu/N3efYo5Qp9p4UKP3tM0EdSFxjrlnRTipU/0tKWB9Q5TG3DkjOlxTCn+w0zmp6uyKyZWwUABLjIYKeSF/0dc= root@vm";
    const RSA_LINE: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCWDcAokmqTFuvhCpocPKqQfesQ+Yvf115KBv92R6BbGkVmMYJzHK54mvs0HC52MAyXoO8cefAibN3nVdw2Pu4vqYstcJ58QA5Oc2j4b9q1llVp4SO6RYLwurccbBWTlLgQaf4o29UNqh7RBdvmbMEe3SUQO5hgGFP6ycXFSdPwQPKFnOp24LzcvA10+16nr40i/yuhvAWQ+7euurlMrSCca0GgPDNN6y2qaSiGsC5V1e/IyJNHNgosdPNKYg95COBgu0z0b9gP2EulcLZaAnoW+fgN6fKUQTdSQlo9RYHrTUcQXgbAE6++/D8XWz9jkmM7Xhvv4FfYXnrqI37QnF+/ root@vm";

    fn ed25519() -> PublicKey {
        let mut rng = russh::keys::key::safe_rng();
        PrivateKey::random(&mut rng, Algorithm::Ed25519)
            .unwrap()
            .public_key()
            .clone()
    }

    fn ecdsa() -> PublicKey {
        PublicKey::from_openssh(ECDSA_LINE).unwrap()
    }

    fn rsa() -> PublicKey {
        PublicKey::from_openssh(RSA_LINE).unwrap()
    }

    /// `keytype base64` of a key, without comment.
    fn key_text(key: &PublicKey) -> String {
        format!(
            "{} {}",
            key.algorithm().as_str(),
            BASE64.encode(&key.to_bytes().unwrap())
        )
    }

    /// The key type and the base64 of a key, apart.
    fn type_and_base64(key: &PublicKey) -> (String, String) {
        let text = key_text(key);
        let (kind, b64) = text.split_once(' ').unwrap();
        (kind.to_owned(), b64.to_owned())
    }

    fn line(hosts: &str, key: &PublicKey) -> String {
        format!("{hosts} {}\n", key_text(key))
    }

    fn check(text: &str, host: &str, port: u16, key: &PublicKey) -> Verdict {
        KnownHosts::parse(text).check(host, port, key)
    }

    /// The OpenSSH cross-checks are part of the suite: a missing ssh-keygen fails them
    /// instead of skipping them silently.
    fn have_ssh_keygen() -> bool {
        assert!(
            Path::new(SSH_KEYGEN).exists(),
            "{SSH_KEYGEN} is required (apt-get install -y openssh-client)"
        );
        true
    }

    /// Whether `ssh-keygen -F name -f file` finds the name (exit status 0).
    fn openssh_finds(file: &Path, name: &str) -> bool {
        let out = Command::new(SSH_KEYGEN)
            .arg("-F")
            .arg(name)
            .arg("-f")
            .arg(file)
            .output()
            .unwrap();
        out.status.success()
    }

    /// Number of lines `ssh-keygen -l -f file` accepts as keys.
    fn openssh_valid_lines(file: &Path) -> usize {
        let out = Command::new(SSH_KEYGEN)
            .arg("-l")
            .arg("-f")
            .arg(file)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().lines().count()
    }

    /// Assert that for every (host, port), our verdict says "some line matches" exactly
    /// when OpenSSH finds the lookup name in the file. Only valid for files without
    /// marker lines.
    fn cross_check(text: &str, probes: &[(&str, u16)], key: &PublicKey) {
        if !have_ssh_keygen() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        std::fs::write(&file, text).unwrap();
        let hosts = KnownHosts::load(&file).unwrap();
        for &(host, port) in probes {
            let ours = hosts.check(host, port, key) != Verdict::Unknown;
            // `ssh` lowercases before looking up; `ssh-keygen -F` does not.
            let name = lookup_name(host, port).to_ascii_lowercase();
            assert_eq!(
                ours,
                openssh_finds(&file, &name),
                "disagreement with ssh-keygen -F {name} on:\n{text}"
            );
        }
    }

    #[test]
    fn exact_name() {
        let key = ed25519();
        let text = line("example.com", &key);
        assert_eq!(check(&text, "example.com", 22, &key), Verdict::Trusted);
        assert_eq!(check(&text, "example.org", 22, &key), Verdict::Unknown);
        assert_eq!(check(&text, "www.example.com", 22, &key), Verdict::Unknown);
        assert_eq!(check(&text, "example.co", 22, &key), Verdict::Unknown);
        cross_check(
            &text,
            &[("example.com", 22), ("example.org", 22), ("example.co", 22)],
            &key,
        );
    }

    #[test]
    fn lookup_name_brackets_non_default_ports() {
        assert_eq!(lookup_name("h", 22), "h");
        assert_eq!(lookup_name("h", 0), "h");
        assert_eq!(lookup_name("h", 2222), "[h]:2222");
        assert_eq!(lookup_name("::1", 2222), "[::1]:2222");
    }

    #[test]
    fn ports() {
        let key = ed25519();
        let plain = line("example.com", &key);
        assert_eq!(check(&plain, "example.com", 22, &key), Verdict::Trusted);
        assert_eq!(check(&plain, "example.com", 2222, &key), Verdict::Unknown);

        let bracketed = line("[example.com]:2222", &key);
        assert_eq!(
            check(&bracketed, "example.com", 2222, &key),
            Verdict::Trusted
        );
        assert_eq!(check(&bracketed, "example.com", 22, &key), Verdict::Unknown);
        assert_eq!(
            check(&bracketed, "example.com", 2223, &key),
            Verdict::Unknown
        );

        // `[host]:22` is never looked up: port 22 uses the bare name.
        let bracketed_22 = line("[example.com]:22", &key);
        assert_eq!(
            check(&bracketed_22, "example.com", 22, &key),
            Verdict::Unknown
        );

        let wild = line("[127.0.0.*]:2222", &key);
        assert_eq!(check(&wild, "127.0.0.5", 2222, &key), Verdict::Trusted);
        assert_eq!(check(&wild, "127.0.0.5", 22, &key), Verdict::Unknown);
        assert_eq!(check(&wild, "127.0.1.5", 2222, &key), Verdict::Unknown);

        for text in [&plain, &bracketed, &bracketed_22, &wild] {
            cross_check(
                text,
                &[
                    ("example.com", 22),
                    ("example.com", 2222),
                    ("127.0.0.5", 2222),
                    ("127.0.0.5", 22),
                ],
                &key,
            );
        }
    }

    #[test]
    fn wildcards() {
        let key = ed25519();
        let text = line("*.example.com,host?", &key);
        assert_eq!(check(&text, "a.example.com", 22, &key), Verdict::Trusted);
        assert_eq!(check(&text, "a.b.example.com", 22, &key), Verdict::Trusted);
        assert_eq!(check(&text, "example.com", 22, &key), Verdict::Unknown);
        assert_eq!(check(&text, "host1", 22, &key), Verdict::Trusted);
        assert_eq!(check(&text, "host", 22, &key), Verdict::Unknown);
        assert_eq!(check(&text, "host12", 22, &key), Verdict::Unknown);
        // `*` at the top level also matches bracketed names.
        let star = line("*", &key);
        assert_eq!(check(&star, "anything", 2222, &key), Verdict::Trusted);
        cross_check(
            &text,
            &[
                ("a.example.com", 22),
                ("a.b.example.com", 22),
                ("example.com", 22),
                ("host1", 22),
                ("host", 22),
                ("host12", 22),
                ("host1", 2222),
            ],
            &key,
        );
    }

    #[test]
    fn glob_edge_cases() {
        let cases: &[(&str, &str, bool)] = &[
            ("", "", true),
            ("a", "", false),
            ("", "*", true),
            ("abc", "a*c", true),
            ("ac", "a*c", true),
            ("abcbc", "a*bc", true),
            ("abcbd", "a*bc", false),
            ("abc", "a**?", true),
            ("ab", "a?*b", false),
            ("aXbYc", "a*b*c", true),
            ("aXbY", "a*b*c", false),
            ("abc", "?*?*?", true),
            ("ab", "?*?*?", false),
        ];
        for &(text, pattern, want) in cases {
            assert_eq!(
                glob_match(text.as_bytes(), pattern.as_bytes()),
                want,
                "{text:?} vs {pattern:?}"
            );
        }
        // Pathological pattern finishes quickly.
        let text = "a".repeat(200);
        let pattern = format!("{}b", "*a".repeat(50));
        assert!(!glob_match(text.as_bytes(), pattern.as_bytes()));
    }

    #[test]
    fn negation() {
        let key = ed25519();
        let text = line("*.example.com,!bad.example.com", &key);
        assert_eq!(check(&text, "good.example.com", 22, &key), Verdict::Trusted);
        assert_eq!(check(&text, "bad.example.com", 22, &key), Verdict::Unknown);
        // Order does not matter.
        let text2 = line("!bad.example.com,*.example.com", &key);
        assert_eq!(check(&text2, "bad.example.com", 22, &key), Verdict::Unknown);
        assert_eq!(
            check(&text2, "good.example.com", 22, &key),
            Verdict::Trusted
        );
        // Only negated patterns never match anything.
        let only_neg = line("!bad.example.com", &key);
        assert_eq!(
            check(&only_neg, "good.example.com", 22, &key),
            Verdict::Unknown
        );
        // A negated line does not hide other lines for the host.
        let both = format!("{text}{}", line("bad.example.com", &key));
        assert_eq!(check(&both, "bad.example.com", 22, &key), Verdict::Trusted);
        for t in [&text, &text2, &only_neg] {
            cross_check(
                t,
                &[("good.example.com", 22), ("bad.example.com", 22)],
                &key,
            );
        }
    }

    #[test]
    fn case_insensitive() {
        let key = ed25519();
        let text = line("Example.COM,[Other.Example.com]:2222", &key);
        assert_eq!(check(&text, "example.com", 22, &key), Verdict::Trusted);
        assert_eq!(check(&text, "EXAMPLE.com", 22, &key), Verdict::Trusted);
        assert_eq!(
            check(&text, "other.EXAMPLE.com", 2222, &key),
            Verdict::Trusted
        );
        cross_check(
            &text,
            &[("EXAMPLE.com", 22), ("other.example.com", 2222)],
            &key,
        );
    }

    #[test]
    fn comma_lists() {
        let key = ed25519();
        let text = line("alpha,beta,[gamma]:2200,10.0.0.1", &key);
        for (host, port) in [
            ("alpha", 22),
            ("beta", 22),
            ("gamma", 2200),
            ("10.0.0.1", 22),
        ] {
            assert_eq!(check(&text, host, port, &key), Verdict::Trusted, "{host}");
        }
        for (host, port) in [("gamma", 22), ("alph", 22), ("delta", 22), ("", 22)] {
            assert_eq!(check(&text, host, port, &key), Verdict::Unknown, "{host}");
        }
        // A trailing comma adds no empty pattern (OpenSSH), an inner empty one matches "".
        assert!(!match_pattern_list("", "a,"));
        assert!(match_pattern_list("", "a,,b"));
        assert!(!match_pattern_list("", ""));
        cross_check(
            &text,
            &[("alpha", 22), ("beta", 22), ("gamma", 2200), ("gamma", 22)],
            &key,
        );
    }

    #[test]
    fn overlong_pattern_never_matches() {
        let long = "a".repeat(1100);
        assert!(!match_pattern_list("host", &format!("host,{long}")));
        assert!(match_pattern_list(
            "host",
            &format!("host,{}", "a".repeat(1022))
        ));
    }

    #[test]
    fn hashed_computed_in_test() {
        let key = ed25519();
        let salt = [7u8; 20];
        let hashed = |name: &str| {
            let mut mac = Hmac::<Sha1>::new_from_slice(&salt).unwrap();
            mac.update(name.as_bytes());
            format!(
                "|1|{}|{}",
                BASE64.encode(&salt),
                BASE64.encode(&mac.finalize().into_bytes())
            )
        };
        let text = format!(
            "{}{}",
            line(&hashed("example.com"), &key),
            line(&hashed("[example.com]:2222"), &key)
        );
        let hosts = KnownHosts::parse(&text);
        assert_eq!(hosts.skipped_lines(), 0);
        assert_eq!(hosts.check("example.com", 22, &key), Verdict::Trusted);
        // The lookup name is lowercased before hashing.
        assert_eq!(hosts.check("Example.Com", 22, &key), Verdict::Trusted);
        assert_eq!(hosts.check("example.com", 2222, &key), Verdict::Trusted);
        assert_eq!(hosts.check("example.com", 2200, &key), Verdict::Unknown);
        assert_eq!(hosts.check("example.org", 22, &key), Verdict::Unknown);
        assert_eq!(
            hosts.check("example.com", 22, &ed25519()),
            Verdict::Changed { line: 1 }
        );
        cross_check(
            &text,
            &[
                ("example.com", 22),
                ("example.com", 2222),
                ("example.com", 2200),
                ("example.org", 22),
            ],
            &key,
        );
    }

    #[test]
    fn hashed_by_ssh_keygen() {
        if !have_ssh_keygen() {
            return;
        }
        let key = ed25519();
        let other = ed25519();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        let text = format!(
            "{}{}{}",
            line("Example.com", &key),
            line("[alt.example.com]:2222", &key),
            line("plain.example.com", &other)
        );
        std::fs::write(&file, &text).unwrap();
        let status = Command::new(SSH_KEYGEN)
            .arg("-H")
            .arg("-f")
            .arg(&file)
            .output()
            .unwrap()
            .status;
        assert!(status.success());
        let hashed_text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            hashed_text.lines().filter(|l| l.starts_with("|1|")).count(),
            3,
            "{hashed_text}"
        );
        let hosts = KnownHosts::load(&file).unwrap();
        assert_eq!(hosts.skipped_lines(), 0);
        assert_eq!(hosts.check("example.com", 22, &key), Verdict::Trusted);
        assert_eq!(hosts.check("EXAMPLE.COM", 22, &key), Verdict::Trusted);
        assert_eq!(hosts.check("alt.example.com", 2222, &key), Verdict::Trusted);
        assert_eq!(hosts.check("alt.example.com", 22, &key), Verdict::Unknown);
        assert_eq!(
            hosts.check("plain.example.com", 22, &other),
            Verdict::Trusted
        );
        assert_eq!(
            hosts.check("plain.example.com", 22, &key),
            Verdict::Changed { line: 3 }
        );
        assert_eq!(hosts.check("example.org", 22, &key), Verdict::Unknown);
        cross_check(
            &hashed_text,
            &[
                ("example.com", 22),
                ("alt.example.com", 2222),
                ("alt.example.com", 22),
                ("plain.example.com", 22),
                ("example.org", 22),
            ],
            &key,
        );
    }

    #[test]
    fn malformed_hashes_are_skipped() {
        let key = ed25519();
        let good_salt = BASE64.encode(&[1u8; 20]);
        let text = [
            line("|1|abc|def", &key),                    // salt not base64 of 20 bytes
            line(&format!("|2|{good_salt}|AAAA"), &key), // unknown hash version
            line(&format!("|1|{good_salt}"), &key),      // no hash part
            line(&format!("|1|{}|AAAA", BASE64.encode(&[1u8; 19])), &key), // short salt
        ]
        .concat();
        let hosts = KnownHosts::parse(&text);
        assert_eq!(hosts.skipped_lines(), 4);
        assert!(hosts.is_empty());
        // Well-formed salt with a wrong hash: valid, simply matches nothing.
        let text = line(&format!("|1|{good_salt}|AAAA"), &key);
        let hosts = KnownHosts::parse(&text);
        assert_eq!(hosts.skipped_lines(), 0);
        assert_eq!(hosts.check("AAAA", 22, &key), Verdict::Unknown);
    }

    #[test]
    fn tabs_and_whitespace() {
        let key = ed25519();
        let (kt, b64) = type_and_base64(&key);
        let text = format!(
            "host1\t{kt}\t{b64}\tcomment\n  \t host2 \t {kt}  {b64}   some comment words\n@revoked\t*\t{kt}\t{b64}\n"
        );
        let hosts = KnownHosts::parse(&text);
        assert_eq!(hosts.skipped_lines(), 0);
        // The third line revokes the key, which proves it parsed.
        assert_eq!(hosts.check("host1", 22, &key), Verdict::Revoked { line: 3 });
        let text = text.lines().take(2).collect::<Vec<_>>().join("\n");
        assert_eq!(check(&text, "host1", 22, &key), Verdict::Trusted);
        assert_eq!(check(&text, "host2", 22, &key), Verdict::Trusted);
        cross_check(&text, &[("host1", 22), ("host2", 22), ("host3", 22)], &key);
    }

    #[test]
    fn comments_blank_lines_crlf() {
        let key = ed25519();
        let text = format!(
            "# a comment\r\n\r\n   \r\n\t# indented comment\r\n{}\r\n\n",
            line("host", &key).trim_end()
        );
        let hosts = KnownHosts::parse(&text);
        assert_eq!(hosts.skipped_lines(), 0);
        assert!(!hosts.is_empty());
        assert_eq!(hosts.check("host", 22, &key), Verdict::Trusted);
        assert_eq!(
            hosts.check("host", 22, &ed25519()),
            Verdict::Changed { line: 5 }
        );
        // Empty text and comment-only text are empty.
        assert!(KnownHosts::parse("").is_empty());
        assert!(KnownHosts::parse("# nothing\n").is_empty());
        assert_eq!(KnownHosts::parse("# nothing\n").skipped_lines(), 0);
    }

    #[test]
    fn invalid_lines_are_skipped_and_counted() {
        let key = ed25519();
        let text_key = key_text(&key);
        let (_, b64) = text_key.split_once(' ').unwrap();
        let blob = BASE64.decode(b64.as_bytes()).unwrap();
        let ecdsa_b64 = ECDSA_LINE.split(' ').nth(1).unwrap();
        let invalid = [
            "bad1 ssh-ed25519 not*base64!".to_owned(),
            format!("bad2 ssh-foo {b64}"),
            "bad3 ssh-ed25519".to_owned(),
            "bad4".to_owned(),
            format!("@bogus bad5 {text_key}"),
            format!("@cert-authority @cert-authority bad6 {text_key}"),
            format!("@cert-authority bad7 ssh-ed25519 {b64}=="),
            format!("bad8 ssh-rsa {b64}"), // type does not match blob
            format!(
                "bad9 ssh-ed25519 {}",
                BASE64.encode(&[blob.as_slice(), &[0, 0, 0, 0]].concat())
            ), // trailing bytes
            format!("bad10 ecdsa-sha2-nistp384 {ecdsa_b64}"), // wrong curve
            format!(
                "bad11 ecdsa-sha2-nistp256 {}",
                ecdsa_b64.replace("dc=", "dd=")
            ), // non-zero trailing bits
            format!(
                "bad12 ecdsa-sha2-nistp256 {}",
                ecdsa_b64.trim_end_matches('=')
            ), // missing padding
            format!("bad13 ssh-ed25519 {b64}#comment"),
            format!("bad14 #ssh-ed25519 {b64}"),
            "@cert-authority".to_owned(),
            format!("bad16 ssh-ed25519 {}", &b64[..b64.len() - 4]), // truncated key
        ];
        let valid = [
            format!("good1 {text_key}"),
            format!("good2 {}", ECDSA_LINE),
            format!("good3 rsa-sha2-256 {}", RSA_LINE.split(' ').nth(1).unwrap()),
        ];
        let mut lines: Vec<String> = invalid.to_vec();
        lines.extend(valid.iter().cloned());
        let text = lines.join("\n") + "\n";
        let hosts = KnownHosts::parse(&text);
        assert_eq!(hosts.skipped_lines(), invalid.len());
        assert_eq!(hosts.files[0].entries.len(), valid.len());
        assert_eq!(hosts.check("good1", 22, &key), Verdict::Trusted);
        assert_eq!(hosts.check("good2", 22, &ecdsa()), Verdict::Trusted);
        assert_eq!(hosts.check("good3", 22, &rsa()), Verdict::Trusted);
        for i in 1..=16 {
            assert_eq!(
                hosts.check(&format!("bad{i}"), 22, &key),
                Verdict::Unknown,
                "bad{i}"
            );
        }

        // OpenSSH agrees on which unmarked lines hold keys.
        if have_ssh_keygen() {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("known_hosts");
            let unmarked: Vec<&String> = lines.iter().filter(|l| !l.starts_with('@')).collect();
            let unmarked_text = unmarked
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            std::fs::write(&file, &unmarked_text).unwrap();
            assert_eq!(openssh_valid_lines(&file), valid.len());
            assert_eq!(
                KnownHosts::parse(&unmarked_text).files[0].entries.len(),
                valid.len()
            );
        }
    }

    /// What matching every plain line finds, the way `check` did before the index: the
    /// reference the index must agree with.
    fn check_by_matching_every_line(
        hosts: &KnownHosts,
        host: &str,
        port: u16,
        key: &PublicKey,
    ) -> Verdict {
        let name = lookup_name(host, port).to_ascii_lowercase();
        let mut first_mismatch = None;
        let plain = hosts.files.iter().flat_map(|f| &f.entries);
        for entry in plain.filter(|e| e.marker == Marker::None) {
            if !hosts_match(&entry.hosts, &name) {
                continue;
            }
            if same_key(&entry.key, key) {
                return Verdict::Trusted;
            }
            first_mismatch.get_or_insert(entry.line);
        }
        first_mismatch.map_or(Verdict::Unknown, |line| Verdict::Changed { line })
    }

    #[test]
    fn the_name_index_finds_what_matching_every_line_finds() {
        let keys = [ed25519(), ecdsa(), rsa()];
        let salt = [7u8; 20];
        let hashed = hash_host(&salt, "h.example").unwrap();
        let hashed_port = hash_host(&salt, "[h.example]:2222").unwrap();
        let fields = [
            "a.example",
            "A.Example,b.example",
            "c.example,",
            "*.wild",
            "!d.example,*.example",
            "e.example,,f.example",
            "[g.example]:2222",
            hashed.as_str(),
            hashed_port.as_str(),
            "a.example,a.example",
            "x?y",
            "b.example,!b.example",
            "[g.example]:*",
            "ünï.example",
        ];
        let mut text = String::new();
        // Two rounds with the keys shifted: a name listed on several lines, some of them
        // with another key, over two files.
        for (round, shift) in [(0, 0), (1, 1)] {
            for (i, field) in fields.iter().enumerate() {
                text.push_str(&line(field, &keys[(i + shift) % keys.len()]));
            }
            if round == 0 {
                text.push_str("garbage line\n# comment\n");
            }
        }
        let middle = text[..text.len() / 2].rfind('\n').unwrap() + 1;
        let (first, second) = text.split_at(middle);
        let mut merged = KnownHosts::parse(first);
        merged.extend(KnownHosts::parse(second));
        let whole = KnownHosts::parse(&text);
        let probes = [
            ("a.example", 22),
            ("A.EXAMPLE", 22),
            ("b.example", 22),
            ("c.example", 22),
            ("z.wild", 22),
            ("d.example", 22),
            ("q.example", 22),
            ("e.example", 22),
            ("f.example", 22),
            ("", 22),
            ("g.example", 2222),
            ("g.example", 22),
            ("h.example", 22),
            ("h.example", 2222),
            ("x1y", 22),
            ("xy", 22),
            ("ünï.example", 22),
            ("nowhere", 22),
        ];
        let mut verdicts = std::collections::HashSet::new();
        for hosts in [&merged, &whole] {
            for (host, port) in probes {
                for key in &keys {
                    let expected = check_by_matching_every_line(hosts, host, port, key);
                    assert_eq!(hosts.check(host, port, key), expected, "{host}:{port}");
                    verdicts.insert(format!("{expected:?}").split(' ').next().map(str::to_owned));
                }
            }
        }
        // The probes reach every kind of answer.
        assert_eq!(verdicts.len(), 3, "{verdicts:?}");
    }

    #[test]
    fn key_rotation() {
        let old = ed25519();
        let new = ed25519();
        let text = format!("{}{}", line("host", &old), line("host", &new));
        assert_eq!(check(&text, "host", 22, &old), Verdict::Trusted);
        assert_eq!(check(&text, "host", 22, &new), Verdict::Trusted);
        assert_eq!(
            check(&text, "host", 22, &ed25519()),
            Verdict::Changed { line: 1 }
        );
    }

    #[test]
    fn changed_reports_first_matching_line() {
        let key = ed25519();
        let text = format!(
            "# header\n{}{}\n{}{}",
            line("other", &key),
            line("*.example.com", &ed25519()),
            line("host.example.com", &ed25519()),
            line("unrelated", &ed25519()),
        );
        assert_eq!(
            check(&text, "host.example.com", 22, &key),
            Verdict::Changed { line: 3 }
        );
        assert_eq!(check(&text, "other", 22, &key), Verdict::Trusted);
        assert_eq!(check(&text, "nobody", 22, &key), Verdict::Unknown);
    }

    #[test]
    fn revoked_beats_trusted() {
        let key = ed25519();
        let text = format!("{}@revoked * {}\n", line("host", &key), key_text(&key));
        assert_eq!(check(&text, "host", 22, &key), Verdict::Revoked { line: 2 });
        // The revoked line's host field does not matter: the key is refused everywhere.
        let text = format!(
            "{}@revoked unrelated.example {}\n",
            line("host", &key),
            key_text(&key)
        );
        assert_eq!(check(&text, "host", 22, &key), Verdict::Revoked { line: 2 });
        assert_eq!(
            check(&text, "elsewhere", 2222, &key),
            Verdict::Revoked { line: 2 }
        );
        // Another key for the host is unaffected.
        let other = ed25519();
        let text = format!("{}{}", text, line("host", &other));
        assert_eq!(check(&text, "host", 22, &other), Verdict::Trusted);
        // A revoked line alone does not make the host known.
        let text = format!("@revoked host {}\n", key_text(&key));
        assert_eq!(check(&text, "host", 22, &other), Verdict::Unknown);
    }

    #[test]
    fn key_fields_skip_whitespace_like_b64_pton() {
        let key = ed25519();
        let (kt, b64) = type_and_base64(&key);
        let (head, tail) = b64.split_at(10);
        // Each of these is a key `ssh` reads (checked with ssh-keygen -l below): a vertical
        // tab or form feed inside the base64, two trailing `\r`s, a NUL after the key.
        let fields = [
            format!("{head}\x0b{tail}"),
            format!("{head}\x0c{tail}"),
            format!("{b64}\r\r"),
            format!("{b64}\r\x0b\r"),
            format!("{b64}\0garbage"),
            format!("{b64}\0 more"),
        ];
        let dir = tempfile::tempdir().unwrap();
        for field in &fields {
            let text = format!("host {kt} {field}\n");
            assert_eq!(
                check(&text, "host", 22, &key),
                Verdict::Trusted,
                "{field:?}"
            );
            let revoked = format!("@revoked host {kt} {field}\n{}", line("host", &key));
            assert_eq!(
                check(&revoked, "host", 22, &key),
                Verdict::Revoked { line: 1 },
                "{field:?}"
            );
            if have_ssh_keygen() {
                let file = dir.path().join("kh");
                std::fs::write(&file, &text).unwrap();
                assert_eq!(openssh_valid_lines(&file), 1, "ssh-keygen reads {field:?}");
            }
        }
    }

    #[test]
    fn a_nul_ends_the_line_as_in_openssh() {
        let key = ed25519();
        // A NUL inside the host field leaves a line without a key: dropped, not `host`.
        let text = format!("host\0evil {}\n", key_text(&key));
        let hosts = KnownHosts::parse(&text);
        assert_eq!(hosts.check("host", 22, &key), Verdict::Unknown);
        assert_eq!(hosts.check("host\0evil", 22, &key), Verdict::Unknown);
        assert_eq!(hosts.skipped_lines(), 1);
        if have_ssh_keygen() {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("kh");
            std::fs::write(&file, &text).unwrap();
            assert_eq!(openssh_valid_lines(&file), 0);
            assert!(!openssh_finds(&file, "host"));
        }
    }

    #[test]
    fn an_unreadable_revocation_refuses_the_hosts_it_names() {
        let key = ed25519();
        let trusted = line("host", &key);
        let (kt, b64) = type_and_base64(&key);
        // Keys no reader can take: refusing the host is the only safe reading.
        for broken in [
            format!("@revoked host {kt} {}", &b64[..b64.len() - 4]),
            format!("@revoked host {kt} not*base64"),
            format!("@revoked host ssh-unknown {b64}"),
            format!("@revoked host {kt}"),
            format!("@revoked @revoked host {kt} {b64}"),
            format!("@cert-authority @revoked host {kt} {b64}"),
        ] {
            let text = format!("{broken}\n{trusted}");
            let hosts = KnownHosts::parse(&text);
            assert_eq!(
                hosts.check("host", 22, &key),
                Verdict::UnreadableRevocation { line: 1 },
                "{broken:?}"
            );
            // Other hosts are unaffected.
            let elsewhere = format!("{text}{}", line("other", &key));
            assert_eq!(
                check(&elsewhere, "other", 22, &key),
                Verdict::Trusted,
                "{broken:?}"
            );
        }
        // Without a readable host field there is no telling which hosts: all of them.
        for broken in [
            "@revoked",
            "@revoked   ",
            "@revoked |1|bad|salt ssh-ed25519 x",
        ] {
            let text = format!("{broken}\n{trusted}{}", line("other", &key));
            for host in ["host", "other"] {
                assert_eq!(
                    check(&text, host, 22, &key),
                    Verdict::UnreadableRevocation { line: 1 },
                    "{broken:?}"
                );
            }
        }
        // An unknown marker is no revocation (OpenSSH skips the line too).
        let text = format!("@revoke host {kt} x\n{trusted}");
        assert_eq!(check(&text, "host", 22, &key), Verdict::Trusted);
    }

    #[test]
    fn cert_authority_lines_are_ignored() {
        let key = ed25519();
        let text = format!("@cert-authority *.example.com {}\n", key_text(&key));
        let hosts = KnownHosts::parse(&text);
        assert_eq!(hosts.skipped_lines(), 0);
        assert!(!hosts.is_empty());
        assert_eq!(hosts.check("a.example.com", 22, &key), Verdict::Unknown);
    }

    #[test]
    fn comments_do_not_affect_key_equality() {
        let key = PublicKey::from_openssh(ECDSA_LINE).unwrap();
        assert_eq!(key.comment().as_str_lossy(), "root@vm");
        let bare = ECDSA_LINE.rsplit_once(' ').unwrap().0;
        let text = format!("host {bare}\n");
        assert_eq!(check(&text, "host", 22, &key), Verdict::Trusted);
        // And the other way round: a commented line, a comment-less key.
        let bare_key = PublicKey::from_openssh(bare).unwrap();
        let text = format!("host {ECDSA_LINE} and more\n");
        assert_eq!(check(&text, "host", 22, &bare_key), Verdict::Trusted);
    }

    #[test]
    fn different_key_type_is_changed() {
        let key = ed25519();
        let text = format!("{}{}", line("host", &ecdsa()), line("host", &rsa()));
        assert_eq!(check(&text, "host", 22, &key), Verdict::Changed { line: 1 });
        assert_eq!(check(&text, "host", 22, &rsa()), Verdict::Trusted);
    }

    #[test]
    fn cached_loads_are_reused_until_a_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let key = ed25519();
        let file = dir.path().join("known_hosts");
        let missing = dir.path().join("absent");
        std::fs::write(&file, line("a.example", &key)).unwrap();
        let paths = vec![file.clone(), missing.clone()];
        let parses = full_parses();
        let first = KnownHosts::load_all_cached(&paths).unwrap();
        KnownHosts::load_all_cached(&paths).unwrap();
        assert_eq!(full_parses(), parses + 1, "unchanged files are parsed once");
        assert_eq!(first.check("a.example", 22, &key), Verdict::Trusted);
        assert_eq!(first.check("b.example", 22, &key), Verdict::Unknown);

        // An appended key (what accept-new does) is seen at once.
        append(&file, "b.example", 22, &key).unwrap();
        let changed = KnownHosts::load_all_cached(&paths).unwrap();
        assert_eq!(
            full_parses(),
            parses + 1,
            "an appended line is parsed alone"
        );
        assert_eq!(changed.check("b.example", 22, &key), Verdict::Trusted);
        // So is a file that appears.
        std::fs::write(&missing, line("c.example", &key)).unwrap();
        let appeared = KnownHosts::load_all_cached(&paths).unwrap();
        assert_eq!(appeared.check("c.example", 22, &key), Verdict::Trusted);
        // A directory where a file should be stays an error.
        assert!(KnownHosts::load_all_cached(&[dir.path().to_path_buf()]).is_err());
    }

    /// The merged entries of a fresh, full load: what an incremental load must equal.
    fn full(paths: &[PathBuf]) -> String {
        let mut all = KnownHosts::default();
        for path in paths {
            all.extend(KnownHosts::load(path).unwrap());
        }
        lines_of(&all)
    }

    /// Every file's lines, revocations and skipped count (not the index: its maps' order
    /// differs between two equal ones), as text to compare.
    fn lines_of(hosts: &KnownHosts) -> String {
        let files: Vec<_> = hosts
            .files
            .iter()
            .map(|f| (&f.entries, &f.unreadable_revocations, f.skipped))
            .collect();
        format!("{files:?}")
    }

    fn cached(paths: &[PathBuf]) -> String {
        lines_of(&KnownHosts::load_all_cached(paths).unwrap())
    }

    #[test]
    fn a_grown_file_is_parsed_from_where_it_was_read_and_equals_a_full_load() {
        let dir = tempfile::tempdir().unwrap();
        let key = ed25519();
        let (user, global) = (dir.path().join("user"), dir.path().join("global"));
        std::fs::write(&user, format!("# comment\n{}", line("a.example", &key))).unwrap();
        std::fs::write(
            &global,
            format!("{}@revoked x.example AAAA\n", line("g.example", &rsa())),
        )
        .unwrap();
        let paths = vec![user.clone(), global.clone()];
        assert_eq!(cached(&paths), full(&paths));
        let parses = full_parses();
        // Appends (accept-new), one line at a time and with junk lines among them: the new
        // entries land before the global file's, with their own line numbers.
        for i in 0..30 {
            append(&user, &format!("h{i}.example"), 2200, &key).unwrap();
            if i % 7 == 0 {
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(&user)
                    .unwrap()
                    .write_all(b"not a valid line\n\n")
                    .unwrap();
            }
            assert_eq!(cached(&paths), full(&paths), "after append {i}");
        }
        assert_eq!(full_parses(), parses, "appends are parsed alone");
        let hosts = KnownHosts::load_all_cached(&paths).unwrap();
        assert_eq!(hosts.check("h29.example", 2200, &key), Verdict::Trusted);
        assert_eq!(
            hosts.check("h29.example", 2200, &rsa()),
            Verdict::Changed { line: 42 }
        );
        // The global file grows too.
        append(&global, "g2.example", 22, &key).unwrap();
        assert_eq!(cached(&paths), full(&paths));
        // Rewritten in place, longer, with other lines: parsed again from the start.
        std::fs::write(
            &user,
            format!(
                "{}{}",
                line("z.example", &key),
                line("y.example", &rsa()).repeat(40)
            ),
        )
        .unwrap();
        assert_eq!(cached(&paths), full(&paths));
        let hosts = KnownHosts::load_all_cached(&paths).unwrap();
        assert_eq!(hosts.check("a.example", 22, &key), Verdict::Unknown);
        // A line being written (no line break yet) is read as it is, then read again whole.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&user)
            .unwrap()
            .write_all(b"w.example ")
            .unwrap();
        assert_eq!(cached(&paths), full(&paths));
        std::fs::OpenOptions::new()
            .append(true)
            .open(&user)
            .unwrap()
            .write_all(line("", &key).trim_start().as_bytes())
            .unwrap();
        assert_eq!(cached(&paths), full(&paths));
        let hosts = KnownHosts::load_all_cached(&paths).unwrap();
        assert_eq!(hosts.check("w.example", 22, &key), Verdict::Trusted);
    }

    /// Another connection appends between the stamp and the read: what was read is parsed
    /// (no parse from the start), and the next look catches up with the stamp.
    #[test]
    fn this_process_appends_are_taken_without_reading_the_file_again() {
        let dir = tempfile::tempdir().unwrap();
        let key = ed25519();
        let file = dir.path().join("known_hosts");
        std::fs::write(&file, line("a.example", &key)).unwrap();
        let paths = vec![file.clone()];
        let trusted = |host: &str| KnownHosts::check_cached(&paths, host, 22, &key).unwrap().0;
        assert_eq!(trusted("a.example"), Verdict::Trusted);
        let (parses, reads) = (full_parses(), growth_reads());
        for host in ["b.example", "c.example", "d.example"] {
            assert_eq!(trusted(host), Verdict::Unknown);
            append(&file, host, 22, &key).unwrap();
            assert_eq!(trusted(host), Verdict::Trusted, "{host}");
        }
        assert_eq!(
            (full_parses(), growth_reads()),
            (parses, reads),
            "own appends are taken as they were written"
        );
        assert_eq!(
            lines_of(&KnownHosts::load_all_cached(&paths).unwrap()),
            full(&paths)
        );
        // Another writer's line is read (and compared) as before.
        let mut other = OpenOptions::new().append(true).open(&file).unwrap();
        other.write_all(line("e.example", &key).as_bytes()).unwrap();
        drop(other);
        assert_eq!(trusted("e.example"), Verdict::Trusted);
        assert_eq!(growth_reads(), reads + 1);
        assert_eq!(
            lines_of(&KnownHosts::load_all_cached(&paths).unwrap()),
            full(&paths)
        );
    }

    #[test]
    fn a_file_that_grew_past_its_stamp_is_parsed_as_read() {
        let dir = tempfile::tempdir().unwrap();
        let key = ed25519();
        let file = dir.path().join("known_hosts");
        std::fs::write(&file, line("a.example", &key)).unwrap();
        let paths = vec![file.clone()];
        let stamps = |paths: &[PathBuf]| -> Vec<(PathBuf, Stamp)> {
            paths
                .iter()
                .map(|p| (p.clone(), stamp(p).unwrap()))
                .collect()
        };
        let mut cached = Cached::load(stamps(&paths), &paths).unwrap();
        append(&file, "b.example", 22, &key).unwrap();
        let stamped = stamps(&paths);
        append(&file, "c.example", 22, &key).unwrap();
        assert!(cached.grow(&stamped));
        for host in ["a.example", "b.example", "c.example"] {
            assert_eq!(
                cached.hosts.check(host, 22, &key),
                Verdict::Trusted,
                "{host}"
            );
        }
        assert!(cached.grow(&stamps(&paths)), "nothing new: still current");
        assert_eq!(lines_of(&cached.hosts), full(&paths));
        // A rewrite of the same length is not taken for growth.
        let text = std::fs::read_to_string(&file)
            .unwrap()
            .replace("a.example", "z.example");
        std::fs::write(&file, text).unwrap();
        append(&file, "d.example", 22, &key).unwrap();
        assert!(!cached.grow(&stamps(&paths)));
    }

    #[test]
    fn load_missing_and_directory() {
        let dir = tempfile::tempdir().unwrap();
        let missing = KnownHosts::load(&dir.path().join("nope")).unwrap();
        assert!(missing.is_empty());
        assert_eq!(missing.skipped_lines(), 0);
        assert!(KnownHosts::load(dir.path()).is_err());
    }

    #[test]
    fn extend_keeps_origins() {
        let key = ed25519();
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user");
        let global = dir.path().join("global");
        std::fs::write(&user, format!("junk\n{}", line("a", &ed25519()))).unwrap();
        std::fs::write(
            &global,
            format!(
                "{}{}@revoked * {}\n",
                line("b", &key),
                line("c", &ed25519()),
                key_text(&rsa())
            ),
        )
        .unwrap();
        let mut all = KnownHosts::load(&user).unwrap();
        all.extend(KnownHosts::load(&global).unwrap());
        assert_eq!(all.skipped_lines(), 1);
        assert_eq!(
            all.check_detailed("a", 22, &key),
            (Verdict::Changed { line: 2 }, Some(user.clone()))
        );
        assert_eq!(
            all.check_detailed("b", 22, &key),
            (Verdict::Trusted, Some(global.clone()))
        );
        assert_eq!(
            all.check_detailed("c", 22, &key),
            (Verdict::Changed { line: 2 }, Some(global.clone()))
        );
        assert_eq!(
            all.check_detailed("a", 22, &rsa()),
            (Verdict::Revoked { line: 3 }, Some(global.clone()))
        );
        assert_eq!(all.check_detailed("z", 22, &key), (Verdict::Unknown, None));
        // Parsed text has no origin.
        let parsed = KnownHosts::parse(&line("a", &key));
        assert_eq!(
            parsed.check_detailed("a", 22, &key),
            (Verdict::Trusted, None)
        );
    }

    #[cfg(unix)]
    #[test]
    fn append_creates_file_and_dirs() {
        use std::os::unix::fs::PermissionsExt;
        let key = ed25519();
        let dir = tempfile::tempdir().unwrap();
        let ssh_dir = dir.path().join("home").join(".ssh");
        let file = ssh_dir.join("known_hosts");
        append(&file, "Example.com", 22, &key).unwrap();
        append(&file, "example.com", 2222, &ecdsa()).unwrap();

        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&ssh_dir), 0o700);

        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            text,
            format!(
                "example.com {}\n[example.com]:2222 {}\n",
                key_text(&key),
                key_text(&ecdsa())
            )
        );
        let hosts = KnownHosts::load(&file).unwrap();
        assert_eq!(hosts.skipped_lines(), 0);
        assert_eq!(hosts.check("example.com", 22, &key), Verdict::Trusted);
        assert_eq!(hosts.check("example.com", 2222, &ecdsa()), Verdict::Trusted);
        assert_eq!(
            hosts.check("example.com", 2222, &key),
            Verdict::Changed { line: 2 }
        );
        cross_check(
            &text,
            &[("example.com", 22), ("example.com", 2222), ("x", 22)],
            &key,
        );
    }

    #[test]
    fn append_adds_missing_newline() {
        let key = ed25519();
        let first = ed25519();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        std::fs::write(&file, line("first", &first).trim_end()).unwrap();
        append(&file, "second", 22, &key).unwrap();
        let hosts = KnownHosts::load(&file).unwrap();
        assert_eq!(hosts.skipped_lines(), 0);
        assert_eq!(hosts.check("first", 22, &first), Verdict::Trusted);
        assert_eq!(hosts.check("second", 22, &key), Verdict::Trusted);
        assert!(std::fs::read_to_string(&file).unwrap().ends_with('\n'));
        // An existing empty file gets no leading blank line.
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "").unwrap();
        append(&empty, "h", 22, &key).unwrap();
        assert_eq!(std::fs::read_to_string(&empty).unwrap(), line("h", &key));
    }

    #[test]
    fn append_refuses_pattern_hosts() {
        let key = ed25519();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        for host in [
            "", "evil,*", "*", "a?", "!a", "|1|x|y", "@revoked", "#x", "a b", "a\nb",
        ] {
            let err = append(&file, host, 22, &key).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{host:?}");
        }
        assert!(!file.exists());
        append(&file, "::1", 2222, &key).unwrap();
        assert_eq!(
            KnownHosts::load(&file).unwrap().check("::1", 2222, &key),
            Verdict::Trusted
        );
    }

    #[test]
    fn fingerprint_matches_openssh() {
        let key = ecdsa();
        let fp = fingerprint(&key);
        assert!(fp.starts_with("SHA256:"), "{fp}");
        assert!(!fp.ends_with('='), "{fp}");
        if !have_ssh_keygen() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key.pub");
        std::fs::write(&file, format!("{ECDSA_LINE}\n")).unwrap();
        let out = Command::new(SSH_KEYGEN)
            .arg("-l")
            .arg("-E")
            .arg("sha256")
            .arg("-f")
            .arg(&file)
            .output()
            .unwrap();
        let out = String::from_utf8(out.stdout).unwrap();
        assert_eq!(out.split_whitespace().nth(1), Some(fp.as_str()), "{out}");
    }
}
