//! Where a host's lines are found: one file's lines indexed by the names they list
//! ([`FileLines`]), and the parsed files kept between connections and brought up to date
//! when a file changes or grows ([`with_cached`]), told apart by their stamps (size,
//! modification time, inode).

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::pattern;

use super::KnownHosts;
use super::parse::{
    Entry, Hosts, Invalid, Marker, UnreadableRevocation, parse_line, unreadable_revocation,
};

/// The lines of one file, in line order, with an index that finds a host's lines.
///
/// Why the index: a fleet with accept-new checks each of its hosts against a file that ends
/// up listing all of them. Matching every line's host field per check made 10,000 hosts cost
/// 10,000 × 10,000 pattern matches, and client CPU per host grew with the fleet (2.6× at
/// 10,000 hosts of what it was at 100, BENCHMARKS.md round 4).
#[derive(Debug, Clone, Default)]
pub(super) struct FileLines {
    /// Valid lines in line order.
    pub(super) entries: Vec<Entry>,
    /// Plain lines whose host field is a list of literal names (what `ssh` and accept-new
    /// write): by each name, lowercased, their positions in `entries`, ascending.
    by_name: HashMap<String, Vec<usize>>,
    /// Plain lines that need matching (wildcards, negations, hashed names), ascending.
    by_pattern: Vec<usize>,
    /// `@revoked` lines, ascending.
    pub(super) revoked: Vec<usize>,
    /// `@revoked` lines that could not be read, in line order.
    pub(super) unreadable_revocations: Vec<UnreadableRevocation>,
    /// Lines that were neither blank, comments, nor valid entries.
    pub(super) skipped: usize,
}

impl FileLines {
    /// [`KnownHosts::parse`] text whose first line is line `first_line` of its file.
    pub(super) fn parse_from(text: &str, first_line: usize) -> FileLines {
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
    pub(super) fn from_bytes(bytes: &[u8], first_line: usize, path: &Path) -> FileLines {
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
    pub(super) fn candidates(&self, name: &str) -> Vec<usize> {
        let named = self.by_name.get(name).map_or(&[][..], Vec::as_slice);
        let mut positions: Vec<usize> = named.iter().chain(&self.by_pattern).copied().collect();
        positions.sort_unstable();
        positions
    }
}

/// The names a host field lists, lowercased, when it is nothing but literal names: then a
/// name matches it exactly when it is one of them. `None` for anything
/// [`hosts_match`](super::parse::hosts_match) must
/// look at (wildcards, negations, hashed names, a piece too long for OpenSSH's buffer).
fn literal_names(hosts: &Hosts) -> Option<Vec<String>> {
    let Hosts::Patterns(list) = hosts else {
        return None;
    };
    // An empty list never matches; `match_pattern_list` ignores one final comma (and
    // declares a list with an overlong piece a non-match: that one is matched).
    if list.is_empty() {
        return Some(Vec::new());
    }
    let list = list.strip_suffix(',').unwrap_or(list);
    list.split(',')
        .map(|piece| {
            let plain = piece.len() <= pattern::LONGEST_LISTED_PATTERN
                && !piece.starts_with('!')
                && pattern::is_literal(piece);
            plain.then(|| piece.to_ascii_lowercase())
        })
        .collect()
}

/// Runs `f` on the cached, up-to-date parse of `paths` (see
/// [`check_cached`](KnownHosts::check_cached)).
pub(super) fn with_cached<T>(
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

/// A file's size, modification time and inode; `None` when it does not exist.
pub(super) type Stamp = Option<(std::time::SystemTime, u64, u64)>;

pub(super) fn stamp(path: &Path) -> io::Result<Stamp> {
    match std::fs::metadata(path) {
        Ok(meta) => Ok(Some(stamp_of(&meta)?)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

pub(super) fn stamp_of(meta: &std::fs::Metadata) -> io::Result<(std::time::SystemTime, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Ok((meta.modified()?, meta.len(), meta.ino()))
}

/// The parsed files [`KnownHosts::check_cached`] keeps, most recently added last.
static CACHE: std::sync::Mutex<Vec<Cached>> = std::sync::Mutex::new(Vec::new());

pub(super) fn lock_cache() -> std::sync::MutexGuard<'static, Vec<Cached>> {
    // A poisoned lock only means a panic elsewhere while swapping entries.
    CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A parsed file list in [`KnownHosts::check_cached`]'s cache.
pub(super) struct Cached {
    /// The files and their stamps when they were last looked at.
    key: Vec<(PathBuf, Stamp)>,
    pub(super) hosts: KnownHosts,
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
    pub(super) fn load(
        key: Vec<(PathBuf, Stamp)>,
        paths: &[PathBuf],
    ) -> Result<Self, (PathBuf, io::Error)> {
        #[cfg(test)]
        super::tests::FULL_PARSES.with(|parses| parses.set(parses.get() + 1));
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
    pub(super) fn own_append(
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
    pub(super) fn grow(&mut self, key: &[(PathBuf, Stamp)]) -> bool {
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
    super::tests::GROWTH_READS.with(|reads| reads.set(reads.get() + 1));
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
