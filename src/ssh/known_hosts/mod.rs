//! OpenSSH `known_hosts` parsing and host-key matching.
//!
//! Follows sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT" and the behaviour of OpenSSH's
//! `hostfile.c` / `match.c` closely, because users point us at the very files `ssh` writes
//! and expect the same answer `ssh` would give. Deliberate differences are noted where they
//! occur (chiefly: `@revoked` applies whatever its host field says, a `@revoked` line that
//! cannot be read refuses the hosts it names instead of being skipped, and host certificates
//! are not supported, so `@cert-authority` lines are parsed but never trust anything).
//!
//! Everything here is synchronous and pure except [`KnownHosts::load`],
//! [`KnownHosts::check_cached`] and [`append`]; async callers should run those on a
//! blocking thread.
//!
//! The parts: this file answers the lookup ([`KnownHosts`], [`Verdict`]); `parse` reads
//! one line (markers, the host field, hashed names, the key); `index` keeps a file's lines
//! findable by host name and the parsed files cached between connections; `append` records
//! a learned key. Host patterns are OpenSSH's, shared with the client configuration
//! (`config::pattern`).

mod append;
mod index;
mod parse;

use std::io;
use std::path::{Path, PathBuf};

use russh::keys::{HashAlg, PublicKey};

pub(crate) use append::append;
use index::FileLines;
use parse::{Entry, hosts_match};

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

/// Parsed known_hosts data, possibly merged from several files.
#[derive(Debug, Clone, Default)]
pub(crate) struct KnownHosts {
    /// One per file, in merge order (the user file first, then the global one, as OpenSSH
    /// consults them); text given to [`parse`](Self::parse) is one.
    files: Vec<FileLines>,
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
    /// by whole lines (accept-new appends) has only its new lines parsed
    /// ([`Cached::grow`](index::Cached::grow)).
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
        index::with_cached(paths, |hosts| hosts.check_detailed(host, port, key))
    }

    /// The cached parse of `paths`, as [`check_cached`](Self::check_cached) sees it.
    #[cfg(test)]
    pub(crate) fn load_all_cached(paths: &[PathBuf]) -> Result<KnownHosts, (PathBuf, io::Error)> {
        index::with_cached(paths, KnownHosts::clone)
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

/// The SHA256 fingerprint text of a key as OpenSSH prints it, e.g. "SHA256:abc...".
pub(crate) fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

/// Whether two keys are the same key. Compares algorithm and key material only: russh's
/// `PublicKey ==` also compares comments, so a key read from a `.pub` file would not equal
/// its own comment-less known_hosts line.
fn same_key(a: &PublicKey, b: &PublicKey) -> bool {
    a.key_data() == b.key_data()
}

#[cfg(test)]
mod tests;
