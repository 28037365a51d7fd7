//! One known_hosts line as OpenSSH's `hostfile.c` reads it: markers, the host field (a
//! pattern list or one hashed name) and what it matches, and the key, accepted exactly
//! when `sshkey_read` accepts it.

use std::path::Path;
use std::sync::Arc;

use data_encoding::BASE64;
use hmac::{Hmac, KeyInit, Mac};
use russh::keys::ssh_encoding::Encode;
use russh::keys::{Algorithm, PublicKey, parse_public_key_base64};
use sha1::Sha1;

use crate::config::pattern;

/// The optional marker in front of a known_hosts line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Marker {
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
pub(super) enum Hosts {
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
pub(super) struct UnreadableRevocation {
    /// The hosts it names; `None` when the host field cannot be read either: then every
    /// host.
    pub(super) hosts: Option<Hosts>,
    /// 1-based line number within its file.
    pub(super) line: usize,
    /// As [`Entry::origin`].
    pub(super) origin: Option<Arc<Path>>,
}

/// One valid known_hosts line.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    /// `@cert-authority` / `@revoked` / none.
    pub(super) marker: Marker,
    /// Which names the line applies to.
    pub(super) hosts: Hosts,
    /// The key on the line.
    pub(super) key: PublicKey,
    /// 1-based line number within its file (or text), for messages.
    pub(super) line: usize,
    /// The file the line came from; `None` for text given to
    /// [`KnownHosts::parse`](super::KnownHosts::parse). Shared because every entry of a file
    /// carries the same path.
    pub(super) origin: Option<Arc<Path>>,
}

/// Marker error: the line is not a valid entry.
pub(super) struct Invalid;

/// Parse one line (without its line terminator). `Ok(None)` for blank and comment lines.
pub(super) fn parse_line(line: &str, number: usize) -> Result<Option<Entry>, Invalid> {
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
pub(super) fn unreadable_revocation(line: &str, number: usize) -> Option<UnreadableRevocation> {
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

/// Whether a line's host field applies to `name` (already lowercased).
pub(super) fn hosts_match(hosts: &Hosts, name: &str) -> bool {
    match hosts {
        Hosts::Patterns(list) => pattern::match_pattern_list(name, list) == Some(true),
        Hosts::Hashed { salt, field } => hash_host(salt, name).is_some_and(|h| h == *field),
    }
}

/// The `|1|salt|hash` text for `name` with this salt, as OpenSSH's `host_hash` makes it.
pub(super) fn hash_host(salt: &[u8], name: &str) -> Option<String> {
    let mut mac = Hmac::<Sha1>::new_from_slice(salt).ok()?;
    mac.update(name.as_bytes());
    let hash = mac.finalize().into_bytes();
    Some(format!(
        "|1|{}|{}",
        BASE64.encode(salt),
        BASE64.encode(&hash)
    ))
}
