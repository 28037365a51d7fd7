//! Recording a learned host key (accept-new): one line appended to a known_hosts file, in
//! a form that names exactly that host, and handed to the cached parses so that they need
//! not read the file again.

use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use data_encoding::BASE64;
use russh::keys::PublicKey;

use super::index::{lock_cache, stamp_of};
use super::lookup_name;

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

/// Whether `host` can be written as a known_hosts name that matches exactly itself.
fn host_is_literal(host: &str) -> bool {
    !host.is_empty()
        && !host.starts_with(['!', '|', '@', '#'])
        && !host
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, ',' | '*' | '?'))
}
