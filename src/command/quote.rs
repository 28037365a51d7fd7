//! POSIX shell quoting: the one escape function every interpolated value passes through.

/// Quotes bytes as one POSIX shell word: `'…'`, with each `'` written as `'\''`.
///
/// Works for any byte except NUL (which no argv can carry), including newlines and
/// non-UTF-8 bytes.
pub(crate) fn quote(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 2);
    out.push(b'\'');
    for &byte in value {
        if byte == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(byte);
        }
    }
    out.push(b'\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Runs `sh -c 'printf %s <quoted>'` locally and returns what the shell saw.
    fn roundtrip(value: &[u8]) -> Vec<u8> {
        use std::os::unix::ffi::OsStrExt;
        let mut script = b"printf %s ".to_vec();
        script.extend_from_slice(&quote(value));
        let out = Command::new("sh")
            .arg("-c")
            .arg(std::ffi::OsStr::from_bytes(&script))
            .output()
            .unwrap();
        out.stdout
    }

    #[test]
    fn quote_survives_hostile_bytes() {
        for value in [
            &b""[..],
            b"plain",
            b"it's",
            b"''",
            b"$(touch /tmp/pwned) `id` $HOME \\ \"x\" !event",
            b"line1\nline2\r\n",
            b"\xff\xfe non-utf8",
            b"-n",
            b"*?[a]",
        ] {
            assert_eq!(
                roundtrip(value),
                value,
                "value {:?}",
                String::from_utf8_lossy(value)
            );
        }
    }
}
